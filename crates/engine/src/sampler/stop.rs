//! Stop strings in streamed text: [`StopMatcher`] holds back what could begin one and
//! releases what cannot.

/// What [`StopMatcher::push`] decided.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopStep {
    /// Text safe to show now (never part of a stop string).
    pub emit: String,
    /// A stop string completed: generation should end; the stop string itself and
    /// anything after it are not emitted.
    pub stopped: bool,
}

/// Finds stop strings in streamed text. Text that could be the beginning of a stop string
/// is held back until the following text shows whether it is one; text that cannot be is
/// released at once.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            stopped: false,
        }
    }

    /// Feeds the next piece of decoded text. After a stop, further input is ignored.
    pub fn push(&mut self, text: &str) -> StopStep {
        if self.stopped {
            return StopStep {
                emit: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(text);
        // Earliest complete stop string.
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let emit = self.held[..at].to_string();
            self.held.clear();
            self.stopped = true;
            return StopStep {
                emit,
                stopped: true,
            };
        }
        // Longest suffix of `held` that is a proper prefix of some stop string.
        let hold_from = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.held[i..];
                self.stops
                    .iter()
                    .any(|s| s.len() > tail.len() && s.starts_with(tail))
            })
            .unwrap_or(self.held.len());
        let emit = self.held[..hold_from].to_string();
        self.held.drain(..hold_from);
        StopStep {
            emit,
            stopped: false,
        }
    }

    /// Text still held back (a partial stop string).
    pub fn pending(&self) -> &str {
        &self.held
    }

    /// Ends the stream (generation stopped for another reason): releases held-back text.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Whether a stop string has completed.
    pub fn stopped(&self) -> bool {
        self.stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_matcher_holds_back_partial_matches() {
        let mut m = StopMatcher::new(vec!["\n\nUser:".into(), "###".into()]);
        let s = m.push("Hello");
        assert_eq!(
            s,
            StopStep {
                emit: "Hello".into(),
                stopped: false
            }
        );
        // "\n" might start "\n\nUser:": held.
        let s = m.push(" world\n");
        assert_eq!(s.emit, " world");
        assert_eq!(m.pending(), "\n");
        let s = m.push("\nUs");
        assert_eq!(s.emit, "");
        assert_eq!(m.pending(), "\n\nUs");
        // Not a stop after all: everything released.
        let s = m.push("ually");
        assert_eq!(
            s,
            StopStep {
                emit: "\n\nUsually".into(),
                stopped: false
            }
        );
        assert_eq!(m.pending(), "");
        // A stop split across pieces, with text before it in the same piece.
        assert_eq!(m.push(" ok #").emit, " ok ");
        let s = m.push("## tail");
        assert_eq!(
            s,
            StopStep {
                emit: "".into(),
                stopped: true
            }
        );
        assert!(m.stopped());
        // After a stop, nothing more comes out.
        assert_eq!(m.push("more").emit, "");
    }

    #[test]
    fn stop_matcher_earliest_stop_and_finish() {
        let mut m = StopMatcher::new(vec!["cd".into(), "b".into()]);
        let s = m.push("abcd");
        assert_eq!(
            s,
            StopStep {
                emit: "a".into(),
                stopped: true
            }
        );
        let mut m = StopMatcher::new(vec!["λμν".into()]);
        // Multi-byte text: held back on character boundaries.
        assert_eq!(m.push("αλ").emit, "α");
        assert_eq!(m.push("μ").emit, "");
        assert_eq!(m.finish(), "λμ");
        assert!(!m.stopped());
    }
}
