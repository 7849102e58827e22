// The end-to-end test's download server: one model file over HTTP/1.1 with Range support
// (`bytes=N-`, answered 206 with Content-Range and an ETag), throttled so that progress is
// visible and the app can be killed mid-download, counting every body byte it hands to a
// socket, per request.

import { createServer } from 'node:http';

/**
 * Serves `data` at `/${name}` on 127.0.0.1 (a free port). `chunk` bytes every `everyMs`
 * (64 KiB / 20 ms ≈ 3.3 MB/s). Resolves to `{ url, requests, close }`; `requests` holds
 * `{ path, range, status, served }` for each request, `served` growing as bytes go out.
 */
export function startModelServer(data, name, { chunk = 64 * 1024, everyMs = 20 } = {}) {
  const requests = [];
  const server = createServer((req, res) => {
    const rec = { path: req.url, range: req.headers.range ?? null, status: 0, served: 0 };
    requests.push(rec);
    if (req.url !== `/${name}`) {
      rec.status = 404;
      res.writeHead(404, { 'content-length': 0 });
      res.end();
      return;
    }
    const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const start = m ? Number(m[1]) : 0;
    if (start > data.length) {
      rec.status = 416;
      res.writeHead(416, { 'content-range': `bytes */${data.length}` });
      res.end();
      return;
    }
    const headers = { 'content-length': data.length - start, 'accept-ranges': 'bytes', etag: '"e2e-1"' };
    if (m) headers['content-range'] = `bytes ${start}-${data.length - 1}/${data.length}`;
    rec.status = m ? 206 : 200;
    res.writeHead(rec.status, headers);
    let pos = start;
    const tick = () => {
      if (res.destroyed) return;
      if (pos >= data.length) {
        res.end();
        return;
      }
      const part = data.subarray(pos, Math.min(pos + chunk, data.length));
      res.write(part);
      rec.served += part.length;
      pos += part.length;
      setTimeout(tick, everyMs);
    };
    tick();
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      resolve({
        url: `http://127.0.0.1:${port}/${name}`,
        requests,
        close: () => new Promise((r) => server.close(() => r())),
      });
    });
  });
}
