#!/usr/bin/env bash
# Runs one fuzz target with the settings of README.md, its working corpus
# seeded from seeds/<target>/ first. Extra arguments go to libFuzzer.
#
#   ./run.sh decode_args                 # 10 minutes
#   ./run.sh openai_sse -runs=100000     # a quick check
set -euo pipefail
cd "$(dirname "$0")"
target=${1:?usage: run.sh TARGET [libFuzzer options…]}
shift
mkdir -p "corpus/$target" "artifacts/$target"
cp -n "seeds/$target"/* "corpus/$target"/ 2>/dev/null || true
dict=()
if [ -f "dicts/$target.dict" ]; then
    dict=("-dict=dicts/$target.dict")
fi
exec cargo +nightly fuzz run "$target" "corpus/$target" -- \
    -max_total_time=600 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    "${dict[@]}" "$@"
