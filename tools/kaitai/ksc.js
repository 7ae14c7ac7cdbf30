#!/usr/bin/env node
// Compiles .ksy files with the pinned kaitai-struct-compiler (JS build, which
// only has a programmatic API).
//
// usage: node ksc.js LANG OUTDIR FILE.ksy...
//
// `imports:` are resolved relative to the directory of the file being compiled
// (all of formats/ lives in one directory). Any compilation problem of severity
// error rejects the compiler's promise: it is printed and the exit status is 1.
// (The JS build of the compiler drops style warnings; it has no way to report them.)
"use strict";

const fs = require("fs");
const path = require("path");
const yaml = require("js-yaml");
const ksc = require("kaitai-struct-compiler");

function loadKsy(file) {
  return yaml.load(fs.readFileSync(file, "utf8"), { filename: file });
}

async function main() {
  const [lang, outDir, ...files] = process.argv.slice(2);
  if (!lang || !outDir || files.length === 0) {
    console.error("usage: node ksc.js LANG OUTDIR FILE.ksy...");
    process.exit(2);
  }
  fs.mkdirSync(outDir, { recursive: true });
  let failed = false;
  for (const file of files) {
    const dir = path.dirname(path.resolve(file));
    const importer = {
      importYaml: (name, mode) => {
        if (mode !== "rel") {
          return Promise.reject(new Error(`absolute import '${name}' is not supported`));
        }
        return Promise.resolve(loadKsy(path.join(dir, name + ".ksy")));
      },
    };
    try {
      const out = await ksc.compile(lang, loadKsy(file), importer, false);
      for (const [name, contents] of Object.entries(out)) {
        fs.writeFileSync(path.join(outDir, name), contents);
      }
      console.log(`${file}: ${Object.keys(out).join(", ")}`);
    } catch (e) {
      failed = true;
      const msg = e && (e.getMessage ? e.getMessage() : e.message || e.toString());
      console.error(`${file}: error: ${msg || e}`);
    }
  }
  process.exit(failed ? 1 : 0);
}

main();
