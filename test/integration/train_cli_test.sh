#!/usr/bin/env bash
# End to end through the CLI on the built-in scene: `mvibr prep`, a short `mvibr train` with
# held-out validation, `mvibr eval` (its JSON read by Python) and `mvibr render` (PNGs read
# back; a pose run's skeleton pictures and their list too), and bad input to all three ending in
# one clear line and a non-zero exit.
#   train_cli_test.sh MVIBR_BINARY SOURCE_DIR
set -euo pipefail
mvibr=$1
source_dir=$2
source "$source_dir/test/integration/lib.sh"

# A tiny model on 32x24 images: seconds, not minutes.
small=(--config "$source_dir/configs/synthetic.txt" --datadir "$work/data" --basedir "$work/runs"
  --N_rand 32 --N_samples 8 --N_importance 4 --num_source_views 3 --source_pool 4
  --coarse_feat_dim 4 --fine_feat_dim 4 --i_print 2)

echo "== prep and train (test views 0 and 8)"
"$mvibr" prep --out "$work/data" --shards 2 --views 12 --width 32 --height 24
"$mvibr" train "${small[@]}" --expname run --n_iters 6 --i_img 3 --i_weights 6 | tee "$work/train"
grep -q "held-out view 0  psnr" "$work/train" || fail "no held-out validation in the log"
[[ $(grep -c "^step [36]/6  validating (every i_img = 3 steps): rendering held-out view 0, 32x24 pixels" \
  "$work/train") -eq 2 ]] || fail "validation does not say what it does"
"$mvibr" train "${small[@]}" --expname rare --n_iters 4 --i_img 5 >"$work/rare"
if grep -q "validating\|held-out" "$work/rare"; then fail "validated off i_img at the end"; fi
grep -q "held-out psnr" "$work/train" || fail "no held-out psnr in the summary"
[[ $(grep -c heldout_psnr "$work/runs/run/metrics.jsonl") -eq 2 ]] ||
  fail "expected validation at steps 3 and 6 in metrics.jsonl"

echo "== eval"
"$mvibr" eval --run "$work/runs/run" --chunk_size 256 >"$work/eval.json" 2>"$work/eval.err"
# Progress on stderr, stdout left to the JSON: 768 rays a view in chunks of 256.
grep -q "^view 1 of 2: 256 of 768 rays; 17% done, eta" "$work/eval.err" ||
  fail "no progress per chunk: $(cat "$work/eval.err")"
grep -q "^view 2 of 2: 768 of 768 rays; 100% done, eta" "$work/eval.err" ||
  fail "no progress to the end: $(cat "$work/eval.err")"
cmp -s "$work/eval.json" "$work/runs/run/eval-6.json" || fail "eval-6.json differs from stdout"
/usr/bin/python3 -c '
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["step"] == 6 and r["split"] == "test", r
assert [v["view"] for v in r["views"]] == [0, 8], r["views"]
assert all(v["name"].startswith("synthetic/") for v in r["views"]), r["views"]
assert all(0 < v["psnr"] < 60 and -1 <= v["ssim"] <= 1 for v in r["views"]), r["views"]
assert math.isclose(r["mean_psnr"], sum(v["psnr"] for v in r["views"]) / 2, rel_tol=1e-9), r
assert math.isclose(r["mean_ssim"], sum(v["ssim"] for v in r["views"]) / 2, rel_tol=1e-9), r
print("eval json ok:", r["mean_psnr"], r["mean_ssim"])
' "$work/eval.json"
"$mvibr" eval --run "$work/runs/run" --split train --max_views 3 >"$work/train-eval.json"
/usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["split"] == "train" and len(r["views"]) == 3, r
' "$work/runs/run/eval-6-train.json"

echo "== render"
"$mvibr" render --run "$work/runs/run" --ckpt "$work/runs/run/checkpoints/ckpt-00000006.h5" |
  tee "$work/render"
[[ $(grep -c "^view " "$work/render") -eq 2 ]] || fail "expected one line per view"
/usr/bin/python3 -c '
import struct, sys
for name, channels in [("synthetic_t000_v000.png", 2), ("synthetic_t000_v000_depth.png", 0),
                       ("synthetic_t000_v008.png", 2), ("synthetic_t000_v008_depth.png", 0)]:
    data = open(sys.argv[1] + "/" + name, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", name
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    assert (width, height, depth, colour) == (32, 24, 8, channels), (name, width, height, colour)
print("render pngs ok")
' "$work/runs/run/renders/6"

echo "== render a camera path"
"$mvibr" render --run "$work/runs/run" --path spiral --frames 4 | tee "$work/spiral"
[[ $(grep -c "^frame " "$work/spiral") -eq 4 ]] || fail "expected one line per spiral frame"
"$mvibr" render --run "$work/runs/run" --path orbit --frames 3 >/dev/null
"$mvibr" render --run "$work/runs/run" --path interpolate --frames 5 --path_views 0,8,4 |
  tee "$work/interpolate"
/usr/bin/python3 -c '
import json, os, struct, sys
for folder, frames in [("path-spiral", 4), ("path-orbit", 3), ("path-interpolate", 5)]:
    cameras = json.load(open(os.path.join(sys.argv[1], folder, "cameras.json")))
    assert [c["frame"] for c in cameras] == list(range(frames)), cameras
    for c in cameras:
        assert len(c["source_views"]) == 3 and len(c["c2w"]) == 12, c
        for name in ("frame-%04d.png" % c["frame"], "frame-%04d_depth.png" % c["frame"]):
            data = open(os.path.join(sys.argv[1], folder, name), "rb").read()
            assert data[:8] == b"\x89PNG\r\n\x1a\n", name
            assert struct.unpack(">II", data[16:24]) == (32, 24), name
cameras = json.load(open(os.path.join(sys.argv[1], "path-interpolate", "cameras.json")))
assert [cameras[i]["c2w"][3] for i in (0, 2, 4)] != [cameras[0]["c2w"][3]] * 3, cameras
print("camera path pngs ok")
' "$work/runs/run/renders/6"
expect_error "--path must be spiral, orbit, interpolate or fixed, got 'circle'" "$mvibr" render \
  --run "$work/runs/run" --path circle
expect_error "needs at least 2 frames, got 1" "$mvibr" render --run "$work/runs/run" \
  --path interpolate --frames 1
expect_error "path view 99 is not a view" "$mvibr" render --run "$work/runs/run" \
  --path interpolate --path_views 0,99
expect_error "--path_views: 'x' is not a view index" "$mvibr" render --run "$work/runs/run" \
  --path interpolate --path_views 0,x
expect_error "--path_views is for --path interpolate or fixed" "$mvibr" render --run "$work/runs/run" \
  --path spiral --path_views 0,8
expect_error "--frames is for a camera path" "$mvibr" render --run "$work/runs/run" --frames 3
expect_error "--time must be a time step (0, 1, ...) or sweep, got 'soon'" "$mvibr" render \
  --run "$work/runs/run" --path spiral --frames 2 --time soon
expect_error "time step 1 is not in scene" "$mvibr" render --run "$work/runs/run" \
  --path fixed --path_views 0 --time 1
expect_error "--path fixed takes one view in --path_views" "$mvibr" render \
  --run "$work/runs/run" --path fixed --path_views 0,1
expect_error "unrecognised option '--path'" "$mvibr" eval --run "$work/runs/run" --path spiral

echo "== render a pose run: every camera of each held-out instant, both skeletons drawn"
"$mvibr" prep --input synthetic_pose --out "$work/pose-data" --width 32 --height 32 --sequences 2 \
  --frames 2 --test_sequences 1 >/dev/null
pose=(--config "$source_dir/configs/pose_synthetic.txt" --datadir "$work/pose-data"
  --basedir "$work/runs" --pose_batch 1 --confidence_channels 4 --confidence_hidden 8)
"$mvibr" train "${pose[@]}" --expname pose --n_iters 1 >/dev/null
# bf16 convolutions on a CPU without AVX-512 (oneDNN held to AVX2): one line, before any step.
ONEDNN_MAX_CPU_ISA=AVX2 expect_error \
  "precision = bf16: oneDNN has no bf16 convolution for this CPU (it needs AVX-512)" \
  "$mvibr" train "${pose[@]}" --expname pose-bf16 --n_iters 1 --precision bf16
[[ ! -e $work/runs/pose-bf16/checkpoints ]] || fail "the refused bf16 run wrote checkpoints"
"$mvibr" render --run "$work/runs/pose" | tee "$work/pose-render"
[[ $(grep -c "^instant [01] synthetic_pose/s01/f00[01]/c0: mpjpe " "$work/pose-render") -eq 2 ]] ||
  fail "expected one line per test instant"
/usr/bin/python3 -c '
import json, os, struct, sys
r = json.load(open(os.path.join(sys.argv[1], "pose_test.json")))
assert r["step"] == 1 and r["upscale"] == 4, r
assert [i["instant"] for i in r["instants"]] == [0, 1], r
for i in r["instants"]:
    assert 0 < i["mpjpe_mm"] < 1e5 and len(i["files"]) == 4, i
    for name in i["files"]:
        data = open(os.path.join(sys.argv[1], name), "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        assert struct.unpack(">IIBB", data[16:26]) == (128, 128, 8, 2), name
assert len([f for f in os.listdir(sys.argv[1]) if f.endswith(".png")]) == 8
print("pose render ok")
' "$work/runs/pose/renders/1"
"$mvibr" render --run "$work/runs/pose" --instant 1 \
  --ckpt "$work/runs/pose/checkpoints/ckpt-00000001.h5" >"$work/pose-one"
[[ $(grep -c "^instant " "$work/pose-one") -eq 1 ]] && grep -q "^instant 1 " "$work/pose-one" ||
  fail "--instant 1 drew other instants: $(cat "$work/pose-one")"
[[ $(grep -c '"instant": ' "$work/runs/pose/renders/1/pose_test.json") -eq 1 ]] &&
  grep -q '"instant": 1,' "$work/runs/pose/renders/1/pose_test.json" ||
  fail "the list does not name instant 1 alone"
expect_error "instant 2 is not in the test split, which has instants 0 to 1" "$mvibr" render \
  --run "$work/runs/pose" --instant 2
expect_error "--instant and --max_views contradict" "$mvibr" render --run "$work/runs/pose" \
  --instant 0 --max_views 1
expect_error "--instant is for pose runs (model = pose)" "$mvibr" render --run "$work/runs/run" \
  --instant 0
"$mvibr" train "${pose[@]}" --expname pose_untrained --n_iters 0 >/dev/null
expect_error "pose_untrained: no checkpoint" "$mvibr" render --run "$work/runs/pose_untrained"

echo "== inspect a checkpoint"
"$mvibr" inspect "$work/runs/run/checkpoints/ckpt-00000006.h5" | tee "$work/inspect"
grep -q "^checkpoint at step 6: " "$work/inspect" || fail "inspect: no step"
grep -q "data positions of 1 rank(s)" "$work/inspect" || fail "inspect: no data positions"
grep -q "net_fine: 37 tensors" "$work/inspect" || fail "inspect: no fine network"
grep -q "both Adam moments of each: ok" "$work/inspect" || fail "inspect: no check"
for damage in nan negative missing; do
  cp "$work/runs/run/checkpoints/ckpt-00000006.h5" "$work/$damage.h5"
  /usr/bin/python3 -c '
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    if sys.argv[2] == "nan":
        f["model/net_coarse.s"][()] = float("nan")
    elif sys.argv[2] == "negative":
        d = f["optimizer/exp_avg_sq/net_fine.rgb_fc.0.bias"]
        d[0] = -1.0
    else:
        del f["optimizer/exp_avg/feature_net.conv1.weight"]
' "$work/$damage.h5" "$damage"
done
expect_error "'model/net_coarse.s' holds an invalid value" "$mvibr" inspect "$work/nan.h5"
expect_error "'optimizer/exp_avg_sq/net_fine.rgb_fc.0.bias' holds an invalid value" "$mvibr" \
  inspect "$work/negative.h5"
expect_error "missing dataset 'optimizer/exp_avg/feature_net.conv1.weight'" "$mvibr" inspect \
  "$work/missing.h5"

echo "== help"
# grep reads all of the help (not -q): stopping early would end mvibr with SIGPIPE mid-write.
"$mvibr" eval --help | grep -- "--max_views" >/dev/null || fail "eval --help"
"$mvibr" render --help | grep -- "--split" >/dev/null || fail "render --help"
"$mvibr" render --help | grep -- "--path_views" >/dev/null || fail "render --help: no path options"
"$mvibr" render --help | grep -- "--instant" >/dev/null || fail "render --help: no pose option"
"$mvibr" train --help | grep -- "--i_img" >/dev/null || fail "train --help"

echo "== bad input"
printf 'datadir = %s\nfrobnicate = 3\n' "$work/data" >"$work/bad.txt"
expect_error "bad.txt: .*frobnicate" "$mvibr" train --config "$work/bad.txt"
expect_error "'device': must be auto, cpu or cuda, got 'gpu'" "$mvibr" train "${small[@]}" \
  --expname gpu --device gpu
# Without a device (CI, this build or this machine), asking for one is an error, not the CPU.
if "$mvibr" --version | grep -E "cuda backend: (not built|built, 0 device)" >/dev/null; then
  expect_error "'device': cuda, but" "$mvibr" train "${small[@]}" --expname gpu --device cuda
  expect_error "'precision': bf16 needs the GPU step" "$mvibr" train "${small[@]}" --expname gpu \
    --precision bf16
fi
"$mvibr" train "${small[@]}" --expname untrained --n_iters 0 >/dev/null
expect_error "nowhere: no such prepared data set" "$mvibr" train --config \
  "$source_dir/configs/synthetic.txt" --datadir "$work/nowhere" --basedir "$work/runs" --expname nodata
[[ ! -e $work/runs/nodata ]] || fail "a run that failed at start left its run directory"
expect_error "nope.h5: no such checkpoint (init_ckpt)" "$mvibr" train "${small[@]}" \
  --expname noinit --init_ckpt "$work/nope.h5"
[[ ! -e $work/runs/noinit ]] || fail "a run that failed at start left its run directory"
expect_error "no checkpoint" "$mvibr" eval --run "$work/runs/untrained"
expect_error "no checkpoint" "$mvibr" render --run "$work/runs/untrained"
expect_error "mvibr eval needs --run" "$mvibr" eval
expect_error "no such run directory" "$mvibr" render --run "$work/runs/nothing-here"
expect_error "no config.txt" "$mvibr" eval --run "$work/data"
expect_error "--split must be test, val or train, got 'tset'" "$mvibr" eval --run "$work/runs/run" \
  --split tset
expect_error "has no val views" "$mvibr" eval --run "$work/runs/run" --split val
expect_error "nope.h5: no such checkpoint" "$mvibr" render --run "$work/runs/run" \
  --ckpt "$work/nope.h5"
expect_error "unrecognised option '--frobnicate'" "$mvibr" eval --run "$work/runs/run" \
  --frobnicate 3

echo "== mvibr stop: bad input, and a run another process trains"
expect_error "mvibr stop needs --run DIR or train's options" "$mvibr" stop
expect_error "no such run directory" "$mvibr" stop --run "$work/runs/nothing-here"
expect_error "--after_step must be >= 0, got -3" "$mvibr" stop --run "$work/runs/run" --after_step -3
expect_error "--after_step and --cancel contradict" "$mvibr" stop --run "$work/runs/run" \
  --after_step 3 --cancel
expect_error "unexpected 'extra' after --run" "$mvibr" stop --run "$work/runs/run" extra
[[ ! -e $work/runs/run/STOP ]] || fail "a refused mvibr stop wrote a request"
"$mvibr" stop --run "$work/runs/run" --after_step 7 | grep -q "to stop after step 7" || fail "no reply"
[[ $(cat "$work/runs/run/STOP") == 7 ]] || fail "the request does not hold its step"
"$mvibr" stop --run "$work/runs/run" --cancel | grep -q "withdrew" || fail "not withdrawn"
[[ ! -e $work/runs/run/STOP ]] || fail "the withdrawn request is still there"
# A process that holds the run's lock (a POSIX lock, which conflicts with mvibr's OFD lock).
hold_lock() {
  /usr/bin/python3 -c '
import fcntl, subprocess, sys
with open(sys.argv[1], "a+") as f:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.truncate(0); f.write("pid 4242 on elsewhere\n"); f.flush()
    sys.exit(subprocess.run(sys.argv[2:]).returncode)
' "$work/runs/run/.train.lock" "$@"
}
expect_error "runs/run is being trained by another mvibr train (pid 4242 on elsewhere)" hold_lock \
  "$mvibr" train "${small[@]}" --expname run --n_iters 12

echo "train_cli_test: all passed"
