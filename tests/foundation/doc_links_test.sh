#!/usr/bin/env bash
# README.md and docs/*.md name only repository paths that exist (a moved script or a renamed doc
# leaves no dangling reference behind).
#
# What counts as a repository path (the rule; other words are prose and are not checked):
#   1. a markdown link target, [text](target), outside fenced code blocks, unless it is a URL
#      (scheme:...) or an anchor (#...): resolved against the folder of the file that holds it,
#      its #anchor dropped;
#   2. a token of path characters (letters, digits, _ . - * /, and at most one {a,b} group) that
#      begins with a top-level folder of the repository and a slash (base/, comm/, docs/,
#      tools/, bench/, tests/, .ci/, ...: the folders git tracks), resolved against the root.
#      build/ and other untracked folders, and the paths git ignores, hold outputs and are not
#      checked. A `*` is a glob that
#      must match something; {a,b} must exist for each alternative. FOLDER/NAME also exists when
#      FOLDER/meson.build builds a program NAME (executable('NAME', ...)): tools/ftcc-train is
#      build/tools/ftcc-train, named as a program;
#   3. a bare file name ending in .md (NOTES.md): at the root or next to the file that names it.
# Usage: doc_links_test.sh [FILE.md...]   (default: README.md docs/*.md)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1

# Top-level folders of the source tree: git's view when this is a checkout, else every folder
# but the build outputs and the hidden ones (.ci excepted).
if tracked=$(git -C "$root" ls-files 2>/dev/null) && [ -n "$tracked" ]; then
  mapfile -t top < <(sed -n 's|^\([^/]*\)/.*|\1|p' <<<"$tracked" | sort -u)
else
  mapfile -t top < <(find . -mindepth 1 -maxdepth 1 -type d ! -name 'build*' ! -name '.*' -printf '%f\n'; echo .ci)
fi
is_top() { local t; for t in "${top[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }

# exists BASE PATH: PATH (relative to BASE; may hold globs and one {a,b} group) names something.
exists() {
  local base=$1 p=$2
  if [[ $p =~ ^(.*)\{([^{}]*)\}(.*)$ ]]; then
    local pre=${BASH_REMATCH[1]} alts=${BASH_REMATCH[2]} post=${BASH_REMATCH[3]} a
    IFS=, read -ra parts <<<"$alts"
    for a in "${parts[@]}"; do exists "$base" "$pre$a$post" || return 1; done
    return 0
  fi
  if [[ $p == *'*'* ]]; then compgen -G "$base/$p" >/dev/null; return; fi
  [ -e "$base/$p" ] && return 0
  # an output that git ignores (bench/training/.venv-torch, made by tools/torch-setup): not checked
  git -C "$root" check-ignore -q -- "$base/$p" 2>/dev/null && return 0
  # a program built by the meson.build of its folder
  [[ $p == */* ]] && grep -qF "executable('${p##*/}'" "$base/${p%/*}/meson.build" 2>/dev/null
}

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(README.md docs/*.md)
  # First, the rule on a page with one reference of each kind that must fail, and some that must not.
  tmp=$(mktemp -d /tmp/ftcc-doc-links.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  cat >"$tmp/page.md" <<'MD'
Must fail: [a link](no-such-page.md), docs/no-such-doc.md, `tools/no-such-tool --trials 5`,
NO-SUCH-NOTES.md option 2, comm/mpi_types.{hpp,h}, tests/*/no_such_*.py.
Must pass: [next page](other.md#part), [docs](https://example.org/docs/x.md), [anchor](#map), build/tools/ftcc-train,
tools/ftcc-train (a program tools/meson.build builds), comm/mpi_types.{hpp,cpp}, tests/*/*.py,
<ftcc/comm/collectives.hpp>, `page.md`, dp/pp/tp, docs/training.md.
```cpp
auto f = [](const char* op) {};
```
MD
  touch "$tmp/other.md"
  out=$("${BASH_SOURCE[0]}" "$tmp/page.md" 2>&1)
  want=("'no-such-page.md'" "'docs/no-such-doc.md'" "'tools/no-such-tool'" "'NO-SUCH-NOTES.md'" "'comm/mpi_types.{hpp,h}'"
        "'tests/*/no_such_*.py'")
  for w in "${want[@]}"; do
    grep -qF "$w" <<<"$out" || { echo "FAIL: the rule missed $w:"; echo "$out"; exit 1; }
  done
  n=$(grep -c 'does not exist' <<<"$out")
  [ "$n" -eq ${#want[@]} ] || { echo "FAIL: $n reported, ${#want[@]} expected (a false positive):"; echo "$out"; exit 1; }
  echo "the rule flags the ${#want[@]} bad references of a test page and nothing else: ok"
fi
bad=0 checked=0
report() { echo "$1:$2: '$3' ($4) does not exist"; bad=$((bad + 1)); }
for f in "${files[@]}"; do
  dir=$(dirname "$f")
  # 1. markdown link targets
  while IFS=: read -r line target; do
    target=${target#](}
    target=${target%%#*}
    [[ -z $target || $target =~ ^[A-Za-z][A-Za-z0-9+.-]*: ]] && continue
    checked=$((checked + 1))
    exists "$dir" "$target" || report "$f" "$line" "$target" "link, relative to $dir/"
  done < <(awk '/^ *```/ { fenced = !fenced; print ""; next } { print fenced ? "" : $0 }' "$f" | grep -noE '\]\([^) ]+')
  # 2. tokens that begin with a top-level folder; 3. bare *.md names (link targets left out: 1. did them)
  while IFS=: read -r line tok; do
    while [[ $tok == *. ]]; do tok=${tok%.}; done
    if [[ $tok == */* ]]; then
      is_top "${tok%%/*}" || continue
      checked=$((checked + 1))
      exists "$root" "$tok" || report "$f" "$line" "$tok" "path from the repository root"
    elif [[ $tok == *.md ]]; then
      checked=$((checked + 1))
      exists "$root" "$tok" || exists "$dir" "$tok" || report "$f" "$line" "$tok" "file name, at the root or in $dir/"
    fi
  done < <(sed -E 's/\]\([^) ]+/](/g' "$f" | grep -noE '[A-Za-z0-9_.*/-]+(\{[A-Za-z0-9_.,-]+\}[A-Za-z0-9_.*/-]*)?')
done
if [ "$bad" -gt 0 ]; then
  echo "FAIL: $bad reference(s) to paths that do not exist (rule: tests/foundation/doc_links_test.sh)"
  exit 1
fi
echo "${#files[@]} file(s), $checked path reference(s), all exist: ok"
