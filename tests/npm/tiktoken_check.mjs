// The tiktoken npm package (a WASM build of tiktoken's Rust core) as the reference for deltafin's
// BPE. Two modes:
//   node tiktoken_check.mjs vocab ENCODING OUT.tiktoken
//     writes the package's ranks for ENCODING (cl100k_base | o200k_base) in tiktoken.model format
//     (base64 token, space, rank per line), after checking every rank against the WASM encoder;
//   node tiktoken_check.mjs compare ENCODING TEXT_FILE IDS.json
//     encodes TEXT_FILE with encode_ordinary and compares with the JSON array in IDS.json.
// Exits non-zero with the first difference and its surroundings on failure.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { get_encoding } from "tiktoken";

const require = createRequire(import.meta.url);

function fail(message) {
  console.error(`FAIL: ${message}`);
  process.exit(1);
}

function writeVocab(encodingName, outPath) {
  // The package ships each encoding as { pat_str, special_tokens, bpe_ranks }, where bpe_ranks
  // holds lines "! FIRST_RANK b64 b64 ..." listing consecutive ranks from FIRST_RANK.
  const data = require(`tiktoken/encoders/${encodingName}.json`);
  const enc = get_encoding(encodingName);
  const lines = [];
  for (const line of data.bpe_ranks.split("\n")) {
    if (!line) continue;
    const fields = line.split(" ");
    let rank = Number(fields[1]);
    if (!Number.isInteger(rank)) fail(`${encodingName}: unexpected bpe_ranks line start ${fields[1]}`);
    for (const b64 of fields.slice(2)) {
      const expected = Buffer.from(enc.decode_single_token_bytes(rank));
      if (!expected.equals(Buffer.from(b64, "base64"))) {
        fail(`${encodingName}: rank ${rank} is ${b64} in bpe_ranks but the encoder disagrees`);
      }
      lines.push(`${b64} ${rank}`);
      rank += 1;
    }
  }
  enc.free();
  writeFileSync(outPath, lines.join("\n") + "\n");
  console.log(`${encodingName}: wrote ${lines.length} ranks to ${outPath}`);
}

function compare(encodingName, textPath, idsPath) {
  const text = readFileSync(textPath, "utf8");
  const ours = JSON.parse(readFileSync(idsPath, "utf8"));
  const enc = get_encoding(encodingName);
  const start = process.hrtime.bigint();
  const theirs = Array.from(enc.encode_ordinary(text));
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const n = Math.min(ours.length, theirs.length);
  let i = 0;
  while (i < n && ours[i] === theirs[i]) i += 1;
  if (i === n && ours.length === theirs.length) {
    console.log(`${encodingName}: ${theirs.length} ids identical over ${Buffer.byteLength(text)} ` +
      `bytes (tiktoken wasm took ${seconds.toFixed(2)} s)`);
    enc.free();
    return;
  }
  const decode = (ids) => Buffer.from(enc.decode(Uint32Array.from(ids))).toString("utf8");
  const before = decode(theirs.slice(Math.max(0, i - 8), i));
  console.error(`first difference at id index ${i} (ours ${ours.length} ids, tiktoken ${theirs.length})`);
  console.error(`  context before: ${JSON.stringify(before)}`);
  console.error(`  tiktoken: ${JSON.stringify(theirs.slice(i, i + 8))} = ${JSON.stringify(decode(theirs.slice(i, i + 8)))}`);
  console.error(`  ours:     ${JSON.stringify(ours.slice(i, i + 8))} = ${JSON.stringify(decode(ours.slice(i, i + 8).filter((x) => x < 300000)))}`);
  enc.free();
  fail(`${encodingName}: ids differ from tiktoken`);
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === "vocab" && rest.length === 2) {
  writeVocab(rest[0], rest[1]);
} else if (mode === "compare" && rest.length === 3) {
  compare(rest[0], rest[1], rest[2]);
} else {
  fail("usage: tiktoken_check.mjs vocab ENCODING OUT | compare ENCODING TEXT IDS.json");
}
