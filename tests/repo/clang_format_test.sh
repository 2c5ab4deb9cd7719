#!/usr/bin/env bash
# The house format is checked, not hoped for: every .h/.cpp under the paths listed in
# tests/repo/clang_format_paths.txt must be exactly what clang-format (Debian 12's, 14.x) writes
# with the repository's .clang-format. Fails listing the files that differ and the command that
# fixes them; fails too when clang-format is missing (scripts/setup.sh installs it).
# Usage: clang_format_test.sh REPO_ROOT
set -euo pipefail
cd "$1"
command -v clang-format > /dev/null || { echo "clang_format: clang-format not found (bash scripts/setup.sh installs it)"; exit 1; }
[ -f .clang-format ] || { echo "clang_format: no .clang-format at the repository root"; exit 1; }
files=()
while read -r path; do
  [[ -z "$path" || "$path" == \#* ]] && continue
  [ -e "$path" ] || { echo "clang_format: $path (tests/repo/clang_format_paths.txt) does not exist"; exit 1; }
  while IFS= read -r f; do files+=("$f"); done < <(find "$path" -type f \( -name '*.h' -o -name '*.cpp' \) | sort)
done < tests/repo/clang_format_paths.txt
[ "${#files[@]}" -gt 0 ] || { echo "clang_format: no files to check"; exit 1; }
bad=()
for f in "${files[@]}"; do
  clang-format --style=file "$f" | cmp -s - "$f" || bad+=("$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
  printf 'clang_format: not formatted: %s\n' "${bad[@]}"
  echo "clang_format: fix with: clang-format -i ${bad[*]}"
  exit 1
fi
echo "clang_format: ${#files[@]} files formatted as .clang-format says ($(clang-format --version | head -1))"
