#!/usr/bin/env bash
# Compiles every formats/*.ksy to Python, JavaScript and Java into
# tools/kaitai/generated/{python,javascript,java} with the kaitai-struct-compiler
# pinned in package.json (installed here by npm with the JavaScript runtime,
# when missing), fetches the Java runtime pinned below from Maven Central, and
# compiles the generated Java and tools/kaitai/java/LdsReader.java into
# generated/classes. generated/ is not versioned: it is rebuilt from scratch
# each run. Exit status is non-zero on any compilation error.
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
mkdir -p "$out"/{python,javascript,java,classes,lib}
node "$here/ksc.js" python "$out/python" "${ksy[@]}"
node "$here/ksc.js" javascript "$out/javascript" "${ksy[@]}"
node "$here/ksc.js" java "$out/java" "${ksy[@]}"

# The Java runtime of the same Kaitai version, from Maven Central (~/.m2 caches it).
java_runtime=io.kaitai:kaitai-struct-runtime:0.11
command -v mvn >/dev/null || { echo "compile.sh: mvn is required for the Java runtime" >&2; exit 1; }
command -v javac >/dev/null || { echo "compile.sh: javac is required" >&2; exit 1; }
mvn -q dependency:copy -Dartifact="$java_runtime" -DoutputDirectory="$out/lib" >&2
javac -d "$out/classes" -cp "$out/lib/*" "$out"/java/*.java "$here"/java/*.java
