#!/usr/bin/env bash
# End to end through the CLI: `mvibr prep` on the built-in scene and on the real data sets,
# `mvibr inspect` reading every frame back, h5py reading the shards, and bad input ending in one
# clear line and a non-zero exit with nothing left that looks finished.
#   prep_cli_test.sh MVIBR_BINARY SOURCE_DIR
set -euo pipefail
mvibr=$1
source_dir=$2
source "$source_dir/test/integration/lib.sh"

echo "== built-in synthetic scene"
"$mvibr" prep --out "$work/synthetic" --shards 3 --views 12 --width 32 --height 24
"$mvibr" inspect "$work/synthetic" | tee "$work/inspect"
grep -q "checked .* frames in 3 shard(s): ok" "$work/inspect" || fail "inspect did not check"
"$mvibr" inspect "$work/synthetic/shard-00001-of-00003.h5" | grep -q "frames: ok" ||
  fail "inspect of one shard"
/usr/bin/python3 "$source_dir/test/data/read_with_h5py.py" "$work/synthetic"
h5dump -H "$work/synthetic/shard-00000-of-00003.h5" | grep -q 'DATASET "frames"' ||
  fail "h5dump cannot read a shard"

echo "== from a config file (the command line wins)"
printf 'views = 6\nwidth = 20\nheight = 18\nshards = 2\n' >"$work/prep.txt"
"$mvibr" prep --config "$work/prep.txt" --out "$work/configured" --views 8
"$mvibr" inspect "$work/configured" | grep -q "views: 8 " || fail "config file / command line"

echo "== dynamic synthetic scene"
"$mvibr" prep --out "$work/dynamic" --views 8 --time_steps 3 --width 24 --height 16 --shards 2
"$mvibr" inspect "$work/dynamic" | grep -q "3 time step(s)" || fail "dynamic time steps"

echo "== bad input"
expect_error "no such" "$mvibr" prep --input "$work/does-not-exist" --out "$work/bad1"
[[ ! -e "$work/bad1/scene.h5" ]] || fail "bad prep left scene.h5"
expect_error "--shards" "$mvibr" prep --out "$work/bad2" --views 4 --shards 9
[[ ! -e "$work/bad2/scene.h5" ]] || fail "bad prep left scene.h5"
expect_error "width" "$mvibr" prep --out "$work/bad3" --width 1
expect_error "unrecognised option" "$mvibr" prep --out "$work/bad4" --frobnicate 3
expect_error "mvibr prep needs --out" "$mvibr" prep
cp "$work/synthetic/shard-00000-of-00003.h5" "$work/truncated.h5"
truncate -s 2000 "$work/truncated.h5"
expect_error "truncated.h5" "$mvibr" inspect "$work/truncated.h5"
expect_error "cannot read" "$mvibr" inspect "$work/nothing-here.h5"

echo "== real data sets"
need_dataset nerf_synthetic_lego_400
lego=$dataset
need_dataset llff_fern
fern=$dataset
need_dataset dnerf_lego_tiny
dnerf=$dataset
"$mvibr" prep --input "$lego" --out "$work/lego" --shards 2 \
  --max_views 6
"$mvibr" inspect "$work/lego" | grep -q "views: 18 (train 6, val 6, test 6)" || fail "lego counts"
"$mvibr" prep --input "$fern" --factor 8 --out "$work/fern" --shards 2
"$mvibr" inspect "$work/fern" | grep -q "views: 20 (train 17, val 0, test 3)" || fail "fern counts"
/usr/bin/python3 "$source_dir/test/data/read_with_h5py.py" "$work/fern"
"$mvibr" prep --input "$dnerf/tiny_dnerf_data.npz" --out "$work/dlego"
"$mvibr" inspect "$work/dlego" | grep -q "dynamic" || fail "dnerf is not dynamic"

echo "prep_cli_test: all passed"
