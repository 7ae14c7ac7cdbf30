#!/usr/bin/env bash
# Compiles every formats/*.ksy to Python into tools/kaitai/generated/ with the
# kaitai-struct-compiler pinned in package.json (installed here by npm when
# missing). generated/ is not versioned: it is rebuilt from scratch each run.
# Exit status is non-zero on any compilation error.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$here/generated"

command -v node >/dev/null || { echo "compile.sh: node is required" >&2; exit 1; }

# node_modules/ must hold exactly the versions pinned in package.json (the lock
# file pins the same ones); anything else (missing, or left by an older pin) is
# replaced by `npm ci`, which installs from package-lock.json only.
installed_as_pinned() {
  (cd "$here" && node -e '
    const pinned = require("./package.json").devDependencies;
    for (const [name, version] of Object.entries(pinned)) {
      let installed;
      try { installed = require("./node_modules/" + name + "/package.json").version; } catch (e) {}
      if (installed !== version) process.exit(1);
    }') 2>/dev/null
}
if ! installed_as_pinned; then
  command -v npm >/dev/null || { echo "compile.sh: npm is required to install the compiler" >&2; exit 1; }
  echo "compile.sh: installing the pinned compiler (npm ci)" >&2
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) >&2
  installed_as_pinned || { echo "compile.sh: npm ci did not install the pinned versions" >&2; exit 1; }
fi

shopt -s nullglob
ksy=("$root"/formats/*.ksy)
if [[ ${#ksy[@]} -eq 0 ]]; then
  echo "compile.sh: no formats/*.ksy found" >&2
  exit 1
fi

rm -rf "$out"
mkdir -p "$out"
node "$here/ksc.js" python "$out" "${ksy[@]}"
