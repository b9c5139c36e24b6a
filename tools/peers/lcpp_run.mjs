// Runs llama.cpp's own Kimi-K3 / Kimi-Linear code on a GGUF from k3_to_gguf.py, through the prebuilt
// libraries of the npm package node-llama-cpp (pinned in package.json): prompt ids in, greedy ids out,
// per-token times and, on request, the logits of every prompt position and of every greedy step.
//
//   node lcpp_run.mjs --model M.gguf --ids 100,137 --tokens 12 [--threads N] [--logits-out F.json]
//                     [--prompt-logits] [--gpu auto|cuda|false] [--no-mmap] [--kv-f32] [--verbose]
//
// stderr: one "token i: id X wall Y ms" line per decode step (the prompt pass is "prompt: ..."), so
// bench_peers.sh reads it like deltafin's; stdout: one JSON line {ids, load_seconds, prompt_seconds,
// step_seconds, seconds_per_token, ...}. The model loads with node-llama-cpp's defaults (mmap on, no
// mlock, an F16 KV cache); only the GPU is off unless --gpu says otherwise. --kv-f32 keeps the MLA
// latent cache in F32 instead, a diagnostic that takes the cache's F16 rounding out of the comparison.
import fs from "node:fs";
import {performance} from "node:perf_hooks";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

function parseArgs(argv) {
  const a = {tokens: 12, threads: 0, gpu: "false", mmap: true, promptLogits: false, kvF32: false, verbose: false};
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
      return argv[++i];
    };
    if (k === "--model") a.model = v();
    else if (k === "--ids") a.ids = v().split(",").map((x) => Number.parseInt(x, 10));
    else if (k === "--tokens") a.tokens = Number.parseInt(v(), 10);
    else if (k === "--threads") a.threads = Number.parseInt(v(), 10);
    else if (k === "--logits-out") a.logitsOut = v();
    else if (k === "--prompt-logits") a.promptLogits = true;
    else if (k === "--gpu") a.gpu = v();
    else if (k === "--no-mmap") a.mmap = false;
    else if (k === "--kv-f32") a.kvF32 = true;
    else if (k === "--verbose") a.verbose = true;  // llama.cpp's load log (buffer types and sizes)
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.model || !a.ids || a.ids.some(Number.isNaN)) {
    throw new Error("usage: lcpp_run.mjs --model M.gguf --ids 1,2,3 [--tokens N] [--logits-out F.json]");
  }
  return a;
}

// A Map<Token, logit> (sorted by logit) back to a dense row indexed by token id.
function denseRow(map, nVocab) {
  const row = new Array(nVocab).fill(null);
  for (const [tok, logit] of map) row[tok] = logit;
  if (row.some((x) => x === null)) throw new Error("node-llama-cpp returned logits for part of the vocabulary");
  return row;
}

const args = parseArgs(process.argv.slice(2));
const t0 = performance.now();
const llama = await getLlama({
  gpu: args.gpu === "false" ? false : args.gpu,
  build: "never",
  logLevel: args.verbose ? LlamaLogLevel.info : LlamaLogLevel.warn,
});
const model = await llama.loadModel({
  modelPath: args.model,
  useMmap: args.mmap,
  gpuLayers: args.gpu === "false" ? 0 : "max",
});
const nVocab = model.fileInsights.metadata?.[model.fileInfo.metadata.general.architecture]?.vocab_size ??
  model.tokens.nVocab ?? model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length;
const nCtx = args.ids.length + args.tokens + 8;
const context = await model.createContext({
  contextSize: nCtx,
  batchSize: Math.max(args.ids.length, 1),
  sequences: 1,
  ...(args.kvF32 ? {experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"} : {}),
  ...(args.threads > 0 ? {threads: args.threads} : {}),
});
const seq = context.getSequence();
const loadSeconds = (performance.now() - t0) / 1e3;

const wantLogits = Boolean(args.logitsOut);
const greedy = {token: true, options: {temperature: 0}};
// The prompt in one batch; the last position samples the first id (and, for the reference
// comparison, every position can return its logits).
const promptItems = args.ids.map((id, i) => {
  const last = i === args.ids.length - 1;
  if (!last && !(wantLogits && args.promptLogits)) return id;
  return [id, {generateNext: {...(last ? greedy : {}), ...(wantLogits ? {logits: true} : {})}}];
});
let t = performance.now();
const promptOut = await seq.controlledEvaluate(promptItems);
const promptSeconds = (performance.now() - t) / 1e3;
const promptLogits = [];
if (wantLogits && args.promptLogits) {
  for (const o of promptOut) promptLogits.push(denseRow(o.next.logits, nVocab));
}
const last = promptOut[promptOut.length - 1].next;
const ids = [last.token];
const greedyLogits = wantLogits ? [denseRow(last.logits, nVocab)] : [];
process.stderr.write(`prompt: ${args.ids.length} ids, wall ${(promptSeconds * 1e3).toFixed(3)} ms, id ${last.token}\n`);

const steps = [];
for (let i = 1; i <= args.tokens; i++) {
  t = performance.now();
  const [o] = await seq.controlledEvaluate([[ids[ids.length - 1], {generateNext: {...greedy, ...(wantLogits ? {logits: true} : {})}}]]);
  const s = (performance.now() - t) / 1e3;
  steps.push(s);
  ids.push(o.next.token);
  if (wantLogits) greedyLogits.push(denseRow(o.next.logits, nVocab));
  process.stderr.write(`token ${i}: id ${o.next.token} wall ${(s * 1e3).toFixed(3)} ms\n`);
}

const sorted = [...steps].sort((x, y) => x - y);
const result = {
  engine: "llama.cpp via node-llama-cpp",
  model: args.model,
  prompt_ids: args.ids,
  ids,
  load_seconds: loadSeconds,
  prompt_seconds: promptSeconds,
  step_seconds: steps,
  seconds_per_token: steps.length ? steps.reduce((x, y) => x + y, 0) / steps.length : null,
  median_seconds_per_token: steps.length ? sorted[Math.floor(sorted.length / 2)] : null,
  threads: context.currentThreads,
  gpu: llama.gpu,
  mmap: args.mmap,
  kv_cache: args.kvF32 ? "F32" : "F16",
};
if (wantLogits) {
  fs.writeFileSync(args.logitsOut, JSON.stringify({ids, prompt_logits: promptLogits, greedy_logits: greedyLogits}));
}
process.stdout.write(JSON.stringify(result) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
