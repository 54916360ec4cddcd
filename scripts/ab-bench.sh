#!/usr/bin/env bash
# S1 and S2 of the old code against the new, side by side:
#   bash scripts/ab-bench.sh OLD_REV [ROUNDS] [NEW_REV]
# Builds the benches of OLD_REV and NEW_REV (default HEAD), each with this
# tree's bench crate (bench/) and harness so that both measure the same
# way, in worktrees (edits made meanwhile change neither), then runs
# `BENCH_ONLY=s12` alternately old, new, old, new… ROUNDS times each
# (default 5). Each run
# starts its own five nodes and measures every contender, floor-pipe5
# included, so each line's ratio to the floor is free of the machine's
# drift between runs. Never run it beside another benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
old_rev=${1:?usage: ab-bench.sh OLD_REV [ROUNDS] [NEW_REV]}
rounds=${2:-5}
new_rev=${3:-HEAD}
target=${CARGO_TARGET_DIR:-$PWD/target}
trees=()
trap 'for t in "${trees[@]}"; do git worktree remove --force "$t" >/dev/null 2>&1 || true; done' EXIT
for side in old new; do
    rev=$old_rev; [ "$side" = new ] && rev=$new_rev
    tree=$(mktemp -d "/tmp/redlock-ab-$side.XXXXXX")
    trees+=("$tree")
    git worktree add -q --detach "$tree" "$rev"
    rm -rf "$tree/bench" "$tree/benches/lock.rs" "$tree/benches/support" "$tree/tests/harness"
    cp -r bench "$tree/bench"
    cp -r tests/harness "$tree/tests/harness"
    # A revision from before the bench had a crate of its own: its
    # manifest names the bench, which now lives in bench/.
    sed -i '/^\[\[bench\]\]$/{N;/name = "lock"/{N;d}}' "$tree/Cargo.toml"
    (cd "$tree/bench" && CARGO_TARGET_DIR="$target/ab-$side" cargo bench --bench lock --no-run -q)
done
for round in $(seq 1 "$rounds"); do
    for i in 0 1; do
        side=old; [ "$i" = 1 ] && side=new
        (cd "${trees[$i]}/bench" && BENCH_ONLY=s12 CARGO_TARGET_DIR="$target/ab-$side" cargo bench --bench lock -q 2>/dev/null) \
            | grep -E '^(redlock-sync \(defaults\)|a client per thread|floor-pipe5|fenced:|one node:|floor-1node)' | sed "s/^/$side $round: /"
    done
done
