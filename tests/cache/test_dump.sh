#!/usr/bin/env bash
# test_dump.sh -- tc-dump against a temporary store filled by test_store.
#   bash tests/cache/test_dump.sh path/to/tc-dump path/to/test_store
# Ends with "N passed, N failed"; exits non-zero on any failure.
set -u
dump="$1"
populate="$2"
dir=$(mktemp -d /tmp/tc-dump-test.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
export TC_CACHE_DIR="$dir"
unset TC_CACHE TC_CACHE_MAX_MB
passed=0 failed=0

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
# check NAME WANT_RC CMD...: CMD's exit status must be WANT_RC; its output
# (stdout and stderr) is kept in $out for further checks.
check() {
  local name="$1" want="$2"
  shift 2
  out=$("$@" 2>&1)
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "$name"; else
    bad "$name (exit $rc, wanted $want)"
    printf '%s\n' "$out" | sed 's/^/    /'
  fi
}
has() {   # has NAME PATTERN: $out matches the extended regex PATTERN
  if printf '%s\n' "$out" | grep -Eq -- "$2"; then ok "$1"; else
    bad "$1 (no /$2/ in output)"
    printf '%s\n' "$out" | sed 's/^/    /'
  fi
}

check "populate" 0 "$populate" --populate "$dir" 5

check "list" 0 "$dump" list
n=$(printf '%s\n' "$out" | grep -Ec '^[0-9a-f]{32} ')
[ "$n" -eq 5 ] && ok "list shows 5 kernels" ||
  bad "list shows $n kernels, not 5"
has "list shows backend, kind, hits, ms, bytes" \
  'cpu +(map|rows) .* hits .* ms .* bytes  '
has "list shows the ops and regions of each kernel" \
  ' bytes  ops MUL ADD EXP SUM  regions [0-9a-f]{16}$'

key=$(printf '%s\n' "$out" | head -n 1 | cut -c1-32)
check "show by prefix" 0 "$dump" show "${key:0:8}"
has "show prints the key" "^key: +$key"
has "show prints the IR section" '^--- ir ---$'
has "show prints the IR" 'y = x \* 2'
has "show prints the source" '^--- source ---$'
has "show prints the guards" '^--- guards ---$'
has "show prints the hits" '^hits: +0$'
has "show prints the ops" '^ops: +MUL ADD EXP SUM$'
has "show prints the regions" '^regions: +[0-9a-f]{16}$'
check "show unknown prefix" 1 "$dump" show ffffffffffffffffffffffffffffffff0
check "show ambiguous prefix" 1 "$dump" show ""
check "show without a prefix" 2 "$dump" show

check "stats" 0 "$dump" stats
has "stats counts entries" '^entries: +5$'
has "stats names the root" "^root: +$dir/v2$"
has "stats sums bytes" '^bytes: +5010 '
ondisk=$(printf '%s\n' "$out" | sed -n 's/^on disk: *\([0-9]*\) .*/\1/p')
metas=$(find "$dir/v2" -name '*.meta' -printf '%s\n' | paste -sd+ | bc)
[ "$ondisk" = $((5010 + metas)) ] && ok "stats counts meta bytes on disk" ||
  bad "on disk: $ondisk, not 5010 + $metas"

check "verify a good store" 0 "$dump" verify
so=$(find "$dir/v2" -name '*.so' | head -n 1)
truncate -s 10 "$so"
check "verify finds a truncated artifact" 1 "$dump" verify
has "verify reports it" 'meta says'
if [ -e "$so" ]; then bad "verify removed the bad artifact"
else ok "verify removed the bad artifact"; fi
check "verify again is clean" 0 "$dump" verify
check "list after verify" 0 "$dump" list
n=$(printf '%s\n' "$out" | grep -Ec '^[0-9a-f]{32} ')
[ "$n" -eq 4 ] && ok "4 kernels left" || bad "$n kernels left, not 4"

check "prune under a large cap" 0 "$dump" prune --max-mb 10
has "prune frees nothing" '^freed 0 bytes; 4 entries'
check "prune --max-mb 0" 0 "$dump" prune --max-mb 0
check "stats after prune" 0 "$dump" stats
has "prune emptied the store" '^entries: +0$'
check "prune with a bad size" 2 "$dump" prune --max-mb lots
TC_CACHE_MAX_MB=0 "$populate" --populate "$dir" 2 >/dev/null 2>&1
check "TC_CACHE_MAX_MB caps puts" 0 "$dump" stats
has "nothing kept under a 0 MiB cap" '^entries: +0$'

# The cap counts every byte: three ~1000-byte artifacts whose metas carry
# 400 KiB of source each are 1.2 MiB, over a 1 MiB cap.
check "populate big metas" 0 "$populate" --populate "$dir" 3 400
check "prune counts meta bytes" 0 "$dump" prune --max-mb 1
has "prune evicted one entry for its meta bytes" '; 2 entries, '
check "prune --max-mb 0 again" 0 "$dump" prune --max-mb 0
TC_CACHE_MAX_MB=1 "$populate" --populate "$dir" 3 400 >/dev/null 2>&1
check "TC_CACHE_MAX_MB counts meta bytes" 0 "$dump" stats
has "2 entries kept under a 1 MiB cap" '^entries: +2$'
check "prune --max-mb 0 once more" 0 "$dump" prune --max-mb 0

# -- Names that are not regular files: never opened (no hang), reported,
# removed. `timeout` turns a hang into exit status 124.
"$populate" --populate "$dir" 4
metas=($(find "$dir/v2" -name '*.meta' | sort))
sos=($(find "$dir/v2" -name '*.so' | sort))
rm "${metas[0]}" && mkfifo "${metas[0]}"
check "list with a FIFO as a meta does not hang" 1 timeout 10 "$dump" list
has "list reports the FIFO entry" 'unreadable metadata'
art1=$(sed -n 's/^artifact: //p' "${metas[1]}")
rm "$dir/v2/$(basename "$(dirname "${metas[1]}")")/$art1"
mkfifo "$dir/v2/$(basename "$(dirname "${metas[1]}")")/$art1"
art2=$(sed -n 's/^artifact: //p' "${metas[2]}")
a2="$(dirname "${metas[2]}")/$art2"
cp "$a2" "$dir/elsewhere.so" && rm "$a2" && ln -s "$dir/elsewhere.so" "$a2"
k3="$(dirname "${metas[3]}")/ffffffffffffffffffffffffffffffff.meta"
mkdir "$k3"
check "verify with FIFOs, a link and a directory does not hang" 1 \
  timeout 10 "$dump" verify
has "verify reports the FIFO meta" 'meta is a FIFO: removed'
has "verify reports the FIFO artifact" 'artifact is a FIFO: removed'
has "verify reports the symbolic link" 'artifact is a symbolic link: removed'
has "verify reports the directory" 'meta is a directory: removed'
has "verify counts 4 problems" '^4 problems found and removed; 1 good entries$'
for f in "${metas[0]}" "${metas[1]}" "${metas[2]}" "$a2" "$k3"; do
  [ -e "$f" ] || [ -L "$f" ] && bad "verify left $f" || ok "verify removed ${f##*/}"
done
[ -f "$dir/elsewhere.so" ] && ok "the link's target is untouched" ||
  bad "the link's target was removed"
check "verify after that is clean" 0 "$dump" verify
has "one good entry" '^ok: 1 entries verified$'

# -- clear tells the truth. A non-empty directory named like a meta cannot
# be removed, whoever runs this.
d="$(dirname "${metas[3]}")/eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee.meta"
mkdir "$d" && touch "$d/x"
check "clear that cannot remove everything" 1 "$dump" clear
has "clear says what it could not remove" 'eeee.meta: cannot remove: '
has "clear reports the failure" 'clear failed: 1 file could not be removed'
rm -r "$d"
# A read-only store: a read-only bind mount in a private namespace where
# this system allows one (it stops root too); else permission bits, which
# stop anyone but root.
"$populate" --populate "$dir" 2
if unshare -rm true 2>/dev/null; then
  check "clear on a read-only store" 1 unshare -rm sh -c \
    'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" clear' \
    sh "$dir" "$dump"
  has "clear says the file system is read-only" 'Read-only file system'
  has "clear reports the failure" 'clear failed: '
elif [ "$(id -u)" -ne 0 ]; then
  chmod 0500 "$dir"/v2/*/
  check "clear on a read-only store" 1 "$dump" clear
  has "clear says permission denied" 'Permission denied'
  chmod 0700 "$dir"/v2/*/
else
  echo "skip clear on a read-only store: root without mount namespaces"
fi
check "stats after a failed clear" 0 "$dump" stats
has "the entries are still there" '^entries: +2$'
if [ "$(id -u)" -eq 0 ]; then
  chown -R 65534 "$dir/v2"
  check "a store owned by someone else is refused" 1 "$dump" clear
  has "tc-dump says whose it is" 'owned by uid 65534'
  chown -R 0 "$dir/v2"
fi

"$populate" --populate "$dir" 3
check "clear" 0 "$dump" clear
has "clear counts entries" 'removed 3 entries'
check "list after clear" 0 "$dump" list
[ -z "$out" ] && ok "store is empty" || bad "store not empty after clear"

check "--help" 0 "$dump" --help
has "help has EXIT STATUS" '^EXIT STATUS$'
has "help has ENVIRONMENT" '^ENVIRONMENT$'
check "-h" 0 "$dump" -h
check "bogus command" 2 "$dump" bogus
has "usage on bogus command" '^usage: tc-dump'
check "no command" 2 "$dump"
check "extra argument" 2 "$dump" list extra
check "TC_CACHE=0" 1 env TC_CACHE=0 "$dump" list

# -- A missing or mistyped store is reported, never created.
for cmd in list stats verify "show 00" prune clear; do
  check "$cmd on a missing directory" 1 env TC_CACHE_DIR="$dir/typo" "$dump" $cmd
  has "$cmd says there is no such directory" 'typo: no such directory'
done
[ -e "$dir/typo" ] && bad "tc-dump created the missing directory" ||
  ok "tc-dump created nothing"
mkdir "$dir/empty"
check "list where no store was made" 1 env TC_CACHE_DIR="$dir/empty" "$dump" list
has "list says there is no store there" 'no kernel store here'
[ -e "$dir/empty/v2" ] && bad "tc-dump created a store" ||
  ok "tc-dump created no store"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
