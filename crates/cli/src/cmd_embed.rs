//! `rwkv embed`: embeddings of texts (hidden state after `ln_out`, never the head).

use clap::Args;
use rwkv_engine::analysis::{cosine, norm, EmbedInput, Pooling};

use crate::common::ModelArgs;

#[derive(Args, Debug)]
pub struct EmbedArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A text to embed (repeatable; all are embedded in one batched pass).
    #[arg(long = "text", required = true)]
    pub texts: Vec<String>,
    /// Mean over each text's tokens instead of the last token's hidden state.
    #[arg(long)]
    pub mean: bool,
    /// Print JSON: model fingerprint, pooling, dim, tokens, norms, vectors, similarity.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: EmbedArgs) -> anyhow::Result<()> {
    let mut eng = a.model.load(a.json)?;
    let pooling = if a.mean { Pooling::Mean } else { Pooling::Last };
    let ids: Vec<Vec<u32>> = a.texts.iter().map(|t| eng.tokenizer().encode(t)).collect();
    for (i, t) in ids.iter().enumerate() {
        if t.is_empty() {
            anyhow::bail!("--text #{} is empty", i + 1);
        }
    }
    // Each text starts from the initial state (a fork of it) when one is given.
    let init = match &a.model.init_state {
        Some(_) => Some(a.model.start_state(&mut eng)?),
        None => None,
    };
    let inputs: Vec<EmbedInput> = ids
        .iter()
        .map(|t| EmbedInput {
            tokens: t,
            from: init,
        })
        .collect();
    let t0 = std::time::Instant::now();
    let emb = eng.embed(&inputs, pooling)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let rows: Vec<&[f32]> = emb.rows().collect();
    let sim: Vec<Vec<f32>> = rows
        .iter()
        .map(|a| rows.iter().map(|b| cosine(a, b)).collect())
        .collect();
    if a.json {
        let out = serde_json::json!({
            "model": eng.info().fingerprint,
            "pooling": pooling,
            "dim": emb.dim,
            "tokens": ids.iter().map(Vec::len).collect::<Vec<_>>(),
            "norms": rows.iter().map(|r| norm(r)).collect::<Vec<_>>(),
            "embeddings": rows,
            "similarity": sim,
            "ms": ms,
        });
        return print_out(&serde_json::to_string(&out)?);
    }
    println!(
        "{} texts → [{}, {}] ({:?} pooling) in {ms:.1} ms",
        rows.len(),
        rows.len(),
        emb.dim,
        pooling
    );
    for (i, r) in rows.iter().enumerate() {
        let head: Vec<String> = r.iter().take(6).map(|v| format!("{v:+.4}")).collect();
        println!(
            "#{:<3} {:>4} tokens  norm {:>8.4}  [{} …]  {}",
            i + 1,
            ids[i].len(),
            norm(r),
            head.join(", "),
            preview(&a.texts[i], 40)
        );
    }
    if rows.len() > 1 {
        print_matrix(
            &(1..=rows.len())
                .map(|i| format!("#{i}"))
                .collect::<Vec<_>>(),
            &sim,
        );
    }
    Ok(())
}

/// Prints `s` and a newline to stdout; a closed pipe (`| head`) ends quietly.
pub fn print_out(s: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{s}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// The first `n` characters of `s` on one line.
pub fn preview(s: &str, n: usize) -> String {
    let one: String = s.chars().map(|c| if c == '\n' { ' ' } else { c }).collect();
    if one.chars().count() > n {
        format!("{}…", one.chars().take(n).collect::<String>())
    } else {
        one
    }
}

/// Prints a labelled square matrix of similarities.
pub fn print_matrix(labels: &[String], m: &[Vec<f32>]) {
    let w = labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(7, 16);
    let cut = |l: &str| l.chars().take(w).collect::<String>();
    println!("\ncosine similarity");
    print!("{:w$} ", "");
    for l in labels {
        print!(" {:>w$}", cut(l));
    }
    println!();
    for (l, row) in labels.iter().zip(m) {
        print!("{:w$} ", cut(l));
        for v in row {
            print!(" {v:>w$.4}");
        }
        println!();
    }
}
