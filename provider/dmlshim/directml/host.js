// dmlshim's DirectML host: runs under Wine with a Windows node.exe and npm's onnxruntime-node, whose
// Windows binding carries onnxruntime.dll and DirectML.dll. It connects back to the Python process on
// 127.0.0.1:<port> and serves requests, one at a time, until the socket closes.
//
// Frame (both ways): u32 LE header length, UTF-8 JSON header, u64 LE body length, body bytes.
// Requests: {op: "info"} | {op: "load", path, disableCpuFallback, logFile} |
//           {op: "run", session, feeds: [{name, type, dims, nbytes}], outputs: [names]} | {op: "release", session}
// A tensor(string) feed or output carries its elements in the header (type "string", strings: [...],
// nbytes 0).
// Replies: {ok: true, ...} or {ok: false, error: message, stage}.
'use strict';
const net = require('net');
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array,
  uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array, uint64: BigUint64Array,
  bool: Uint8Array, float16: Uint16Array,
};

const sessions = new Map();
let nextSession = 1;

function frame(header, body) {
  const h = Buffer.from(JSON.stringify(header), 'utf8');
  const b = body || Buffer.alloc(0);
  const out = Buffer.alloc(4 + h.length + 8 + b.length);
  out.writeUInt32LE(h.length, 0);
  h.copy(out, 4);
  out.writeBigUInt64LE(BigInt(b.length), 4 + h.length);
  b.copy(out, 12 + h.length);
  return out;
}

function tensorFrom(spec, body, offset) {
  if (spec.type === 'string') return new ort.Tensor('string', spec.strings, spec.dims); // in the header
  const Arr = ARRAYS[spec.type];
  if (!Arr) throw new Error(`dmlshim host: element type ${spec.type} cannot be fed to onnxruntime-node`);
  const bytes = Buffer.from(body.subarray(offset, offset + spec.nbytes)); // aligned copy
  const data = new Arr(bytes.buffer, bytes.byteOffset, spec.nbytes / Arr.BYTES_PER_ELEMENT);
  return new ort.Tensor(spec.type, data, spec.dims);
}

async function handle(req, body) {
  if (req.op === 'info') {
    return [{ ok: true, node: process.version, platform: process.platform, arch: process.arch,
      ort: require('onnxruntime-node/package.json').version }, null];
  }
  if (req.op === 'load') {
    if (req.logLevel !== undefined) ort.env.logLevel = req.logLevel;
    const options = {
      executionProviders: ['dml'],
      enableMemPattern: false,
      executionMode: 'sequential',
      graphOptimizationLevel: req.optimization || 'all',
      logSeverityLevel: req.logSeverity === undefined ? 2 : req.logSeverity,
      extra: { session: { disable_cpu_ep_fallback: req.disableCpuFallback ? '1' : '0' } },
    };
    const session = await ort.InferenceSession.create(req.path, options);
    const id = nextSession++;
    sessions.set(id, session);
    return [{ ok: true, session: id, inputs: session.inputNames, outputs: session.outputNames }, null];
  }
  if (req.op === 'run') {
    const session = sessions.get(req.session);
    if (!session) throw new Error(`dmlshim host: no session ${req.session}`);
    const feeds = {};
    let offset = 0;
    for (const spec of req.feeds) {
      feeds[spec.name] = tensorFrom(spec, body, offset);
      offset += spec.nbytes;
    }
    const results = await session.run(feeds, req.outputs);
    const specs = [];
    const parts = [];
    for (const name of req.outputs) {
      const t = results[name];
      if (t.type === 'string') { // strings travel in the header, as JSON
        specs.push({ name, type: 'string', dims: t.dims, nbytes: 0, strings: Array.from(t.data) });
        continue;
      }
      const buf = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
      specs.push({ name, type: t.type, dims: t.dims, nbytes: buf.length });
      parts.push(buf);
    }
    return [{ ok: true, outputs: specs }, Buffer.concat(parts)];
  }
  if (req.op === 'release') {
    const session = sessions.get(req.session);
    sessions.delete(req.session);
    if (session) await session.release();
    return [{ ok: true }, null];
  }
  throw new Error(`dmlshim host: unknown request ${req.op}`);
}

function serve(socket) {
  let pending = Buffer.alloc(0);
  let busy = Promise.resolve();
  socket.on('data', (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    for (;;) {
      if (pending.length < 4) return;
      const hlen = pending.readUInt32LE(0);
      if (pending.length < 12 + hlen) return;
      const blen = Number(pending.readBigUInt64LE(4 + hlen));
      if (pending.length < 12 + hlen + blen) return;
      const req = JSON.parse(pending.subarray(4, 4 + hlen).toString('utf8'));
      const body = pending.subarray(12 + hlen, 12 + hlen + blen);
      pending = pending.subarray(12 + hlen + blen);
      busy = busy.then(async () => {
        let reply;
        try {
          reply = await handle(req, body);
        } catch (err) {
          reply = [{ ok: false, error: String(err && err.message ? err.message : err), stage: req.op }, null];
        }
        socket.write(frame(reply[0], reply[1]));
      });
    }
  });
  socket.on('close', () => process.exit(0));
  socket.on('error', () => process.exit(1));
}

const port = Number(process.argv[2]);
const socket = net.connect({ host: '127.0.0.1', port }, () => serve(socket));
socket.on('error', (err) => { fs.writeSync(2, `dmlshim host: ${err.message}\n`); process.exit(2); });
