#!/usr/bin/env bash
# Screenshots a `mixprec report` HTML page with headless Chromium (/usr/bin/chromium, Debian
# package `chromium`, installed by scripts/setup.sh). Offline: networking,
# updates and sync are off, and a throw-away profile is used. Fails clearly when Chromium is
# missing or writes no image. Usage: bash scripts/render_report.sh REPORT.html OUT.png
#   (env CHROMIUM overrides the browser path, WINDOW_SIZE the viewport, default 1400,2400)
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 REPORT.html OUT.png" >&2
  exit 2
fi
html=$1
png=$2
chromium=${CHROMIUM:-/usr/bin/chromium}
size=${WINDOW_SIZE:-1400,2400}

if [ ! -x "$chromium" ]; then
  echo "render_report: $chromium not found; install it with 'apt-get install chromium' (Debian)" >&2
  exit 3
fi
if [ ! -r "$html" ]; then
  echo "render_report: cannot read '$html'" >&2
  exit 1
fi

html_abs=$(realpath "$html")
mkdir -p "$(dirname "$png")"
png_abs=$(realpath -m "$png")
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
rm -f "$png_abs"

"$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --disable-dev-shm-usage --hide-scrollbars --user-data-dir="$profile" \
  --screenshot="$png_abs" --window-size="$size" "file://$html_abs" > "$profile/log" 2>&1 || {
  echo "render_report: chromium failed:" >&2
  tail -20 "$profile/log" >&2
  exit 1
}
if [ ! -s "$png_abs" ]; then
  echo "render_report: chromium wrote no screenshot to '$png_abs':" >&2
  tail -20 "$profile/log" >&2
  exit 1
fi
echo "wrote $png ($(stat -c %s "$png_abs") bytes)"
