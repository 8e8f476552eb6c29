#!/usr/bin/env bash
# tools/torch_checkpoint.py both ways on trained runs: export gives IBRNet's three state dicts
# with the checkpoint's values under IBRNet's names; import of that file (also as saved from a
# DistributedDataParallel wrapper, with IBRNet's optimizer entry) renders exactly what the
# original checkpoint renders, starts a fine-tuning run (init_ckpt) and resumes from step 0
# without a data-position warning (ckpt_path); a DynIBaR run exports as DynibarMono.save_model's
# dictionary (five state dicts, traj_basis, global_step) and imports back to the same renders;
# bad files end with one clear line.
#   torch_checkpoint_test.sh MVIBR_BINARY SOURCE_DIR
set -euo pipefail
mvibr=$1
source_dir=$2
tool="/usr/bin/python3 $source_dir/tools/torch_checkpoint.py"
source "$source_dir/test/integration/lib.sh"

small=(--config "$source_dir/configs/synthetic.txt" --datadir "$work/data" --basedir "$work/runs"
  --N_rand 32 --N_samples 8 --N_importance 4 --num_source_views 3 --source_pool 4
  --coarse_feat_dim 4 --fine_feat_dim 4 --i_print 1 --i_img 100)

echo "== a trained run"
"$mvibr" prep --out "$work/data" --shards 1 --views 12 --width 32 --height 24 >/dev/null
"$mvibr" train "${small[@]}" --expname run --n_iters 3 >/dev/null
checkpoint=$work/runs/run/checkpoints/ckpt-00000003.h5

echo "== export"
$tool export "$checkpoint" "$work/model.pth"
/usr/bin/python3 -c '
import h5py, numpy as np, sys, torch
saved = torch.load(sys.argv[2])
assert sorted(saved) == ["feature_net", "net_coarse", "net_fine"], sorted(saved)
with h5py.File(sys.argv[1], "r") as f:
    names = sorted(f["model"])
    assert sorted(n + "." + k for n in saved for k in saved[n]) == names
    for network, params in saved.items():
        for name, value in params.items():
            assert value.dtype == torch.float32, (name, value.dtype)
            stored = torch.from_numpy(np.asarray(f["model"][network + "." + name]))
            assert value.shape == stored.shape and torch.equal(value, stored), name
assert saved["net_coarse"]["s"].shape == (), saved["net_coarse"]["s"].shape
assert saved["feature_net"]["conv1.weight"].shape[1:] == (3, 7, 7)
print("export: %d tensors, IBRNet names and shapes" % len(names))
' "$checkpoint" "$work/model.pth"

echo "== import, as IBRNet saves it from DistributedDataParallel"
/usr/bin/python3 -c '
import sys, torch
saved = torch.load(sys.argv[1])
wrapped = {n: {"module." + k: v for k, v in d.items()} for n, d in saved.items()}
wrapped["optimizer"] = {"state": {}, "param_groups": []}
wrapped["scheduler"] = {"last_epoch": 255000}
torch.save(wrapped, sys.argv[2])
' "$work/model.pth" "$work/ddp.pth"
$tool import "$work/ddp.pth" "$work/imported.h5"
"$mvibr" render --run "$work/runs/run" --ckpt "$checkpoint" --max_views 2 >/dev/null
"$mvibr" render --run "$work/runs/run" --ckpt "$work/imported.h5" --max_views 2 >/dev/null
diff -r "$work/runs/run/renders/3" "$work/runs/run/renders/0" ||
  fail "the imported weights render differently"
"$mvibr" train "${small[@]}" --expname tuned --n_iters 2 --init_ckpt "$work/imported.h5" |
  tee "$work/tuned"
grep -q "starting from the weights of $work/imported.h5" "$work/tuned" ||
  fail "fine-tuning did not start from the imported weights"
[[ -f $work/runs/tuned/checkpoints/ckpt-00000002.h5 ]] || fail "no checkpoint after fine-tuning"
# As a checkpoint to resume from (IBRNet's ckpt_path): step 0, and no data position to restore.
"$mvibr" train "${small[@]}" --expname resumed --n_iters 2 --ckpt_path "$work/imported.h5" |
  tee "$work/resumed"
grep -q "at step 0" "$work/resumed" || fail "resuming did not start at step 0"
grep -q "without a data position" "$work/resumed" || fail "no note on the data position"
! grep -q "warning" "$work/resumed" || fail "a warning for imported weights"

echo "== bad input"
echo "not a checkpoint" >"$work/text.pth"
expect_error "text.pth: not a PyTorch checkpoint" $tool import "$work/text.pth" "$work/x.h5"
/usr/bin/python3 -c '
import sys, torch
saved = torch.load(sys.argv[1])
torch.save({"net_fine": saved["net_fine"]}, sys.argv[2])
saved["net_coarse"]["s"] = torch.tensor(float("nan"))
torch.save(saved, sys.argv[3])
del saved["net_fine"]
saved["net_coarse"]["s"] = torch.tensor(0.2)
torch.save(saved, sys.argv[4])
' "$work/model.pth" "$work/fine-only.pth" "$work/nan.pth" "$work/coarse-only.pth"
expect_error "fine-only.pth: not an IBRNet or DynIBaR checkpoint" $tool import "$work/fine-only.pth" \
  "$work/x.h5"
expect_error "nan.pth: net_coarse.s holds a value that is not finite" $tool import \
  "$work/nan.pth" "$work/x.h5"
[[ ! -e $work/x.h5 ]] || fail "a failed import left a file"
# A coarse-only file imports, and mvibr names what its model misses.
$tool import "$work/coarse-only.pth" "$work/coarse-only.h5" >/dev/null
expect_error "missing parameter 'model/net_fine" "$mvibr" render --run "$work/runs/run" \
  --ckpt "$work/coarse-only.h5"
expect_error "scene.h5: not an mvibr checkpoint" $tool export "$work/data/scene.h5" "$work/x.pth"

echo "== DynIBaR: a trained run both ways"
"$mvibr" prep --out "$work/video" --rig monocular --time_steps 10 --views 10 --width 32 --height 24 \
  --time_window 4 --neighbours 8 >/dev/null
dynibar=(--model dynibar --datadir "$work/video" --basedir "$work/runs" --device cpu
  --feature_net small --coarse_feat_dim 4 --fine_feat_dim 4 --N_rand 16 --N_samples 12
  --N_importance 0 --inv_uniform 1 --anti_alias_pooling 0 --num_source_views 3 --max_range 4
  --init_decay_epoch 1 --i_print 1 --i_img 100)
"$mvibr" train "${dynibar[@]}" --expname dyn --n_iters 2 >/dev/null
dyn_checkpoint=$work/runs/dyn/checkpoints/ckpt-00000002.h5
$tool export "$dyn_checkpoint" "$work/dynibar.pth"
/usr/bin/python3 -c '
import h5py, numpy as np, sys, torch
saved = torch.load(sys.argv[2])
networks = ["feature_net", "feature_net_st", "motion_mlp", "net_coarse_dy", "net_coarse_st"]
assert sorted(k for k in saved if isinstance(saved[k], dict)) == networks, sorted(saved)
assert saved["global_step"] == 2, saved["global_step"]
with h5py.File(sys.argv[1], "r") as f:
    assert torch.equal(saved["traj_basis"], torch.from_numpy(np.asarray(f["model/trajectory_basis"])))
    assert saved["traj_basis"].shape == (10, 6), saved["traj_basis"].shape
    names = sorted(n + "." + k for n in networks for k in saved[n]) + ["trajectory_basis"]
    assert names == sorted(f["model"]), set(names) ^ set(f["model"])
    head = saved["motion_mlp"]["coeff_linear.weight"]
    assert head.shape == (18, 256) and torch.equal(head, torch.from_numpy(np.asarray(
        f["model/motion_mlp.coeff_linear.weight"])))
print("DynIBaR export: %d tensors, DynibarMono.save_model names and shapes" % len(names))
' "$dyn_checkpoint" "$work/dynibar.pth"
$tool import "$work/dynibar.pth" "$work/dynibar.h5"
"$mvibr" render --run "$work/runs/dyn" --ckpt "$dyn_checkpoint" --max_views 1 >/dev/null
"$mvibr" render --run "$work/runs/dyn" --ckpt "$work/dynibar.h5" --max_views 1 >/dev/null
diff -r "$work/runs/dyn/renders/2" "$work/runs/dyn/renders/0" ||
  fail "the imported DynIBaR weights render differently"
/usr/bin/python3 -c '
import sys, torch
saved = torch.load(sys.argv[1])
del saved["traj_basis"]
torch.save(saved, sys.argv[2])
' "$work/dynibar.pth" "$work/no-basis.pth"
expect_error "no-basis.pth: the DynIBaR checkpoint has no .traj_basis." $tool import \
  "$work/no-basis.pth" "$work/x.h5"
echo "torch_checkpoint_test: all passed"
