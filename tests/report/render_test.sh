#!/usr/bin/env bash
# The fixture report renders in headless Chromium (scripts/render_report.sh) to a real PNG that is
# not tiny. scripts/setup.sh installs Chromium (Debian package `chromium`); a missing browser
# fails this test, it never skips.
# Usage: render_test.sh MIXPREC FIXTURE_DIR RENDER_SCRIPT
set -uo pipefail
M="$1"
FX="$2"
RENDER="$3"
if [ ! -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
  echo "FAIL: chromium is not installed (scripts/setup.sh installs it: apt-get install chromium)"
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$M" report "$FX/fixture_run.json" --trace "$FX/fixture_trace.csv" -o "$dir/fx.html" > /dev/null || fail "report failed"
bash "$RENDER" "$dir/fx.html" "$dir/fx.png" || fail "render_report.sh failed"
[ -s "$dir/fx.png" ] || fail "no screenshot"
[ "$(head -c 8 "$dir/fx.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "not a PNG"
size=$(stat -c %s "$dir/fx.png")
# A blank 1400x2400 page compresses to a few kB; charts and tables make it well over 50 kB.
[ "$size" -gt 50000 ] || fail "screenshot is only $size bytes: is the page blank?"
# The missing-browser path fails clearly.
out=$(CHROMIUM=/nonexistent/chromium bash "$RENDER" "$dir/fx.html" "$dir/y.png" 2>&1) && fail "missing chromium accepted"
grep -q "not found" <<< "$out" || fail "unclear message for a missing chromium: $out"
echo "renders in chromium ok ($size bytes)"
