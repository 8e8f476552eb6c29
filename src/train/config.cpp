// The training configuration's one table of keys (see config.h).
// - Each row: the key, its group in --help, the TrainConfig member, the help, the check its value
//   must pass, and whether to_text (checkpoints, the cross-rank comparison) carries it.
// - Parsing is Boost.Program_options over the rows; defaults are TrainConfig's initialisers.
// - Enumerated keys travel as text through Program_options and are named through EnumNames.
#include "mvibr/train/config.h"

#include <boost/program_options.hpp>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <variant>

#include "mvibr/core/config_file.h"
#include "mvibr/core/error.h"

namespace po = boost::program_options;

namespace mvibr::train {

namespace {

// An enumerated member, set from and printed as its names.
struct EnumMember {
  std::function<bool(TrainConfig&, const std::string&)> set;  // false: not one of the names
  std::function<std::string(const TrainConfig&)> get;
  std::string names;    // "a | b | c", for --help
  std::string choices;  // "a, b or c", for errors
};

template <typename E>
EnumMember enum_member(E TrainConfig::*member) {
  std::string names;
  for (const auto& entry : EnumNames<E>::values)
    names += (names.empty() ? "" : " | ") + std::string(entry.second);
  return {[member](TrainConfig& c, const std::string& text) {
            const std::optional<E> value = parse_name<E>(text);
            if (value) c.*member = *value;
            return value.has_value();
          },
          [member](const TrainConfig& c) { return std::string(name_of(c.*member)); }, names,
          names_of<E>()};
}

using Member = std::variant<std::string TrainConfig::*, int TrainConfig::*, uint64_t TrainConfig::*,
                            double TrainConfig::*, bool TrainConfig::*, EnumMember>;

// What a key's value must satisfy (null: anything its type parses to) and the words for it.
struct Check {
  bool (*holds)(const TrainConfig&) = nullptr;
  const char* requirement = "";
};

struct Key {
  const char* name;
  const char* group;
  Member member;
  const char* help;
  Check check = {};
  bool in_text = true;  // false: where a run starts, not what it trains
};

using C = TrainConfig;

const std::vector<Key>& keys() {
  static const std::vector<Key> table = {
      {"expname",
       "run",
       &C::expname,
       "experiment name; the run directory is basedir/expname",
       {[](const C& c) { return !c.expname.empty() && c.expname.find('/') == std::string::npos; },
        "must be a non-empty name without '/'"}},
      {"basedir", "run", &C::basedir, "where runs are kept"},
      {"datadir",
       "run",
       &C::datadir,
       "a folder written by `mvibr prep` (required)",
       {[](const C& c) { return !c.datadir.empty(); },
        "is required (a folder written by mvibr prep)"}},
      {"seed", "run", &C::seed, "seed of initialisation and sampling"},
      {"n_iters",
       "run",
       &C::n_iters,
       "training steps",
       {[](const C& c) { return c.n_iters >= 0; }, "must be >= 0"}},
      {"i_print",
       "run",
       &C::i_print,
       "steps between log lines",
       {[](const C& c) { return c.i_print >= 1; }, "must be >= 1"}},
      {"i_img",
       "run",
       &C::i_img,
       "steps between validation images",
       {[](const C& c) { return c.i_img >= 1; }, "must be >= 1"}},
      {"i_weights",
       "run",
       &C::i_weights,
       "steps between checkpoints",
       {[](const C& c) { return c.i_weights >= 1; }, "must be >= 1"}},
      {"keep_checkpoints",
       "run",
       &C::keep_checkpoints,
       "checkpoints kept in the run directory",
       {[](const C& c) { return c.keep_checkpoints >= 1; }, "must be >= 1"}},
      {"ckpt_path", "run", &C::ckpt_path, "resume from this checkpoint", {}, false},
      {"no_reload", "run", &C::no_reload, "start fresh even if the run has checkpoints", {}, false},
      {"init_ckpt",
       "run",
       &C::init_ckpt,
       "a new run's initial weights (fresh optimiser, step 0); unused once the run has "
       "checkpoints",
       {},
       false},

      {"N_rand",
       "data",
       &C::N_rand,
       "rays per step per rank",
       {[](const C& c) { return c.N_rand >= 1; }, "must be >= 1"}},
      {"chunk_size",
       "data",
       &C::chunk_size,
       "rays per chunk when rendering",
       {[](const C& c) { return c.chunk_size >= 1; }, "must be >= 1"}},
      {"num_source_views",
       "data",
       &C::num_source_views,
       "source views per target",
       {[](const C& c) { return c.num_source_views >= 1; }, "must be >= 1"}},
      {"source_pool",
       "data",
       &C::source_pool,
       "sources are drawn from this many nearest views",
       {[](const C& c) { return c.source_pool >= c.num_source_views; },
        "must be >= num_source_views"}},
      {"sample_mode", "data", enum_member(&C::sample_mode), "where target pixels are drawn"},
      {"center_ratio",
       "data",
       &C::center_ratio,
       "center sampling: the central fraction of the image",
       {[](const C& c) { return c.center_ratio > 0 && c.center_ratio <= 1; }, "must be in (0, 1]"}},
      {"queue_depth",
       "data",
       &C::queue_depth,
       "samples the reader prefetches",
       {[](const C& c) { return c.queue_depth >= 1; }, "must be >= 1"}},

      {"model", "model", enum_member(&C::model),
       "what trains: IBRNet, DynIBaR on a video, or the multi-view pose model"},
      {"feature_net", "model", enum_member(&C::feature_net), "the feature network's size"},
      {"conv_algorithm", "model", enum_member(&C::conv_algorithm),
       "the CPU's 3x3 stride-1 convolutions: oneDNN's direct kernels or Winograd (about 2x "
       "faster)"},
      {"coarse_feat_dim",
       "model",
       &C::coarse_feat_dim,
       "coarse feature channels",
       {[](const C& c) { return c.coarse_feat_dim >= 1; }, "must be >= 1"}},
      {"fine_feat_dim",
       "model",
       &C::fine_feat_dim,
       "fine feature channels",
       {[](const C& c) { return c.fine_feat_dim >= 1; }, "must be >= 1"}},
      {"coarse_only", "model", &C::coarse_only, "no fine network"},
      {"anti_alias_pooling", "model", &C::anti_alias_pooling, "IBRNet's anti-alias pooling"},
      {"N_samples",
       "model",
       &C::N_samples,
       "coarse samples per ray",
       {[](const C& c) {
          return c.N_samples >= 1 && (c.coarse_only || c.N_importance == 0 || c.N_samples >= 3);
        },
        "must be >= 1, and >= 3 for importance sampling"}},
      {"N_importance",
       "model",
       &C::N_importance,
       "importance samples per ray",
       {[](const C& c) { return c.N_importance >= 0; }, "must be >= 0"}},
      {"inv_uniform", "model", &C::inv_uniform, "sample uniformly in inverse depth"},
      {"det", "model", &C::det, "deterministic samples"},
      {"white_bkgd", "model", &C::white_bkgd, "composite on white"},
      {"delta", "model", enum_member(&C::delta),
       "sample spacing: IBRNet's unit or NeRF's interval"},
      {"device", "model", enum_member(&C::device),
       "where the step runs (auto: a GPU when there is one)"},
      {"precision",
       "model",
       enum_member(&C::precision),
       "the GPU step's GEMMs (fp32 weights, activations and gradients); on the CPU, bf16 "
       "operands (nn/layers.h: Operands) in the pose model's convolutions and DynIBaR's "
       "networks",
       {[](const C& c) {
          return c.precision == Precision::kFp32 || c.device != Device::kCpu ||
                 (c.precision == Precision::kBf16 &&
                  (c.model == ModelKind::kPose || c.model == ModelKind::kDynibar));
        },
        "device = cpu runs fp32, and bf16 only for model = pose or dynibar"}},
      {"flush_subnormals", "model", &C::flush_subnormals,
       "treat subnormal floats (below 1.2e-38) as zero while training, as "
       "torch.set_flush_denormal(True): CPU arithmetic on them is 30-150x slower"},
      {"loss_scale",
       "model",
       &C::loss_scale,
       "fp16: the initial dynamic loss scale",
       {[](const C& c) { return c.loss_scale > 0; }, "must be > 0"}},
      {"loss_scale_window",
       "model",
       &C::loss_scale_window,
       "fp16: finite steps in a row before the loss scale doubles",
       {[](const C& c) { return c.loss_scale_window >= 1; }, "must be >= 1"}},

      {"lrate_feature",
       "optimisation",
       &C::lrate_feature,
       "learning rate of the feature network",
       {[](const C& c) { return c.lrate_feature >= 0; }, "must be >= 0"}},
      {"lrate_mlp",
       "optimisation",
       &C::lrate_mlp,
       "learning rate of the aggregation networks",
       {[](const C& c) { return c.lrate_mlp >= 0; }, "must be >= 0"}},
      {"lrate_decay_factor",
       "optimisation",
       &C::lrate_decay_factor,
       "learning-rate decay factor",
       {[](const C& c) { return c.lrate_decay_factor > 0; }, "must be > 0"}},
      {"lrate_decay_steps",
       "optimisation",
       &C::lrate_decay_steps,
       "steps between decays",
       {[](const C& c) { return c.lrate_decay_steps >= 1; }, "must be >= 1"}},
      {"grad_clip",
       "optimisation",
       &C::grad_clip,
       "max global gradient norm (0: off)",
       {[](const C& c) { return c.grad_clip >= 0; }, "must be >= 0"}},
      {"optimizer",
       "optimisation",
       enum_member(&C::optimizer),
       "Adam (IBRNet's), AdamW (decoupled weight decay) or LAMB (per-tensor trust ratio)",
       {[](const C& c) {
          return c.optimizer != nn::OptimizerKind::kLamb || c.device != Device::kCuda ||
                 c.model != ModelKind::kIbrnet;
        },
        "lamb runs on the CPU step only (device = cpu): IBRNet's GPU step has no per-tensor "
        "norms"}},
      {"weight_decay",
       "optimisation",
       &C::weight_decay,
       "adam: an L2 penalty (grad += weight_decay x p, torch.optim.Adam's); adamw, lamb: "
       "decoupled weight decay (p *= 1 - lr x weight_decay)",
       {[](const C& c) { return c.weight_decay >= 0; }, "must be >= 0"}},
      {"weight_decay_1d", "optimisation", &C::weight_decay_1d,
       "decay 1-D tensors (biases, norm scales) too; by default they are spared"},
      {"lr_schedule",
       "optimisation",
       enum_member(&C::lr_schedule),
       "IBRNet's step decay, or a linear warm-up then a cosine to min_lr_ratio at n_iters",
       {[](const C& c) {
          return c.lr_schedule != nn::LrSchedule::kCosine || c.model != ModelKind::kDynibar;
        },
        "cosine is for model = ibrnet; DynIBaR keeps its own schedule"}},
      {"warmup_steps",
       "optimisation",
       &C::warmup_steps,
       "cosine: updates of linear warm-up from 0",
       {[](const C& c) {
          return c.lr_schedule == nn::LrSchedule::kCosine
                     ? c.warmup_steps >= 0 && c.warmup_steps < c.n_iters
                     : c.warmup_steps == 0;
        },
        "must be 0 with lr_schedule = step, and in [0, n_iters) with cosine"}},
      {"min_lr_ratio",
       "optimisation",
       &C::min_lr_ratio,
       "cosine: the final rate as a fraction of the initial one",
       {[](const C& c) {
          return c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1 &&
                 (c.min_lr_ratio == 0 || c.lr_schedule == nn::LrSchedule::kCosine);
        },
        "must be in [0, 1], and 0 unless lr_schedule = cosine"}},

      {"num_frames",
       "dynibar",
       &C::num_frames,
       "the video's frames, the trajectory basis's rows (0: the data's)",
       {[](const C& c) { return c.num_frames == 0 || c.num_frames > c.num_basis; },
        "must be 0 or more than num_basis"}},
      {"num_basis",
       "dynibar",
       &C::num_basis,
       "trajectory basis functions (coefficients per axis)",
       {[](const C& c) { return c.num_basis >= 1; }, "must be >= 1"}},
      {"max_range",
       "dynibar",
       &C::max_range,
       "the static sources' reach in frames",
       {[](const C& c) { return c.max_range >= 1; }, "must be >= 1"}},
      {"init_decay_epoch",
       "dynibar",
       &C::init_decay_epoch,
       "epochs per decay; the static bootstrap is half as many",
       {[](const C& c) { return c.init_decay_epoch >= 1; }, "must be >= 1"}},
      {"decay_rate",
       "dynibar",
       &C::decay_rate,
       "w_disp and w_flow are divided by it each decay",
       {[](const C& c) { return c.decay_rate > 0; }, "must be > 0"}},
      {"w_disp",
       "dynibar",
       &C::w_disp,
       "disparity loss weight",
       {[](const C& c) { return c.w_disp >= 0; }, "must be >= 0"}},
      {"w_flow",
       "dynibar",
       &C::w_flow,
       "optical-flow loss weight",
       {[](const C& c) { return c.w_flow >= 0; }, "must be >= 0"}},
      {"w_cycle",
       "dynibar",
       &C::w_cycle,
       "trajectory cycle-consistency weight",
       {[](const C& c) { return c.w_cycle >= 0; }, "must be >= 0"}},
      {"cycle_factor",
       "dynibar",
       &C::cycle_factor,
       "w_cycle grows by this each decay when annealing",
       {[](const C& c) { return c.cycle_factor >= 0; }, "must be >= 0"}},
      {"anneal_cycle", "dynibar", &C::anneal_cycle, "anneal w_cycle up to 0.5"},
      {"w_reg",
       "dynibar",
       &C::w_reg,
       "scene-flow regulariser weight",
       {[](const C& c) { return c.w_reg >= 0; }, "must be >= 0"}},
      {"w_skew_entropy",
       "dynibar",
       &C::w_skew_entropy,
       "skew entropy weight",
       {[](const C& c) { return c.w_skew_entropy >= 0; }, "must be >= 0"}},
      {"w_distortion",
       "dynibar",
       &C::w_distortion,
       "distortion loss weight",
       {[](const C& c) { return c.w_distortion >= 0; }, "must be >= 0"}},

      {"pose_batch",
       "pose",
       &C::pose_batch,
       "instants (every camera's view of one moment) per micro-batch per rank",
       {[](const C& c) { return c.pose_batch >= 1; }, "must be >= 1"}},
      {"confidence_channels",
       "pose",
       &C::confidence_channels,
       "backbone channels beside the heatmaps that feed the confidence head",
       {[](const C& c) { return c.confidence_channels >= 1; }, "must be >= 1"}},
      {"confidence_hidden",
       "pose",
       &C::confidence_hidden,
       "the confidence head's hidden width",
       {[](const C& c) { return c.confidence_hidden >= 1; }, "must be >= 1"}},
      {"heatmap_multiplier",
       "pose",
       &C::heatmap_multiplier,
       "heatmaps are scaled by this before the soft-argmax's softmax",
       {[](const C& c) { return c.heatmap_multiplier > 0; }, "must be > 0"}},
      {"w_joints_2d",
       "pose",
       &C::w_joints_2d,
       "weight of the 2D term (L1 of visible joints, in image widths) beside the 3D one",
       {[](const C& c) { return c.w_joints_2d >= 0; }, "must be >= 0"}},
      {"use_confidences", "pose", &C::use_confidences,
       "weigh each view's equations by its learned confidence (else all alike)"},
      {"cross_view_fusion", "pose", &C::cross_view_fusion,
       "fuse each view's heatmaps with learned maps of the other views' (Qiu et al. 2019); the "
       "loss then also trains the raw heatmaps"},
      {"lrate_fusion",
       "pose",
       &C::lrate_fusion,
       "learning rate of the cross-view fusion weights (far below lrate_mlp: each fused cell sums "
       "every cell of the other views)",
       {[](const C& c) { return c.lrate_fusion >= 0; }, "must be >= 0"}},
      {"fusion_init_scale",
       "pose",
       &C::fusion_init_scale,
       "the fusion weights start at this times the published U(0, 0.1) (1: as published; 0, "
       "zeros, let fusion grow in from 0.4 of each view's own heatmaps)",
       {[](const C& c) { return c.fusion_init_scale >= 0; }, "must be >= 0"}},
      {"recompute_backbone", "pose", &C::recompute_backbone,
       "gradient checkpointing: keep no backbone activations, run each instant's forward again "
       "in the backward (one instant's activations in memory, one more forward)"},

      {"accumulation_steps",
       "data-parallel",
       &C::accumulation_steps,
       "micro-steps of N_rand rays per rank before each update",
       {[](const C& c) { return c.accumulation_steps >= 1; }, "must be >= 1"}},
      {"lr_scaling", "data-parallel", enum_member(&C::lr_scaling),
       "learning rates times 1, the ranks, or their square root"},
      {"bucket_mb",
       "data-parallel",
       &C::bucket_mb,
       "gradient all-reduce bucket size in MB",
       {[](const C& c) { return c.bucket_mb > 0; }, "must be > 0"}},
      {"overlap_allreduce", "data-parallel", &C::overlap_allreduce,
       "all-reduce gradient buckets during the backward pass"},
      {"allreduce_dtype", "data-parallel", enum_member(&C::allreduce_dtype),
       "gradients travel as float or bfloat16 (half the bytes; CPU ranks)"},
      {"watchdog_s",
       "data-parallel",
       &C::watchdog_s,
       "seconds a rank may wait for the others before the job is ended",
       {[](const C& c) { return c.watchdog_s > 0; }, "must be > 0"}},
      {"nan_policy", "data-parallel", enum_member(&C::nan_policy),
       "on a non-finite loss or gradient: skip the update, or checkpoint the last good state and "
       "stop"},
      {"allow_shared_shards", "data-parallel", &C::allow_shared_shards,
       "let ranks share shards when there are fewer shards than ranks"},
  };
  return table;
}

const char* const kGroups[] = {"run",     "data", "model",        "optimisation",
                               "dynibar", "pose", "data-parallel"};

// `resume` is the design's spelling of where a run starts (--resume auto | none | PATH); parsing
// turns it into ckpt_path and no_reload, IBRNet's keys.
constexpr const char* kResumeFromNewest = "auto";

// The text of a member's value, as to_text writes it and parsing reads it back.
std::string text_of(const Member& member, const TrainConfig& c) {
  std::ostringstream out;
  out.precision(17);
  std::visit(
      [&](const auto& m) {
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, EnumMember>) {
          out << m.get(c);
        } else {
          out << c.*m;
        }
      },
      member);
  return out.str();
}

// The Program_options of every row into `c` (enumerated ones into `enum_texts`, by row), under
// their groups, with TrainConfig's defaults.
po::options_description options(TrainConfig* c, std::vector<std::string>* enum_texts,
                                std::string* resume) {
  const TrainConfig defaults;
  enum_texts->resize(keys().size());
  std::map<std::string, po::options_description> groups;
  for (const char* group : kGroups) groups.emplace(group, po::options_description(group));
  for (size_t i = 0; i < keys().size(); ++i) {
    const Key& key = keys()[i];
    const std::string initial = text_of(key.member, defaults);
    const po::value_semantic* semantic = std::visit(
        [&](const auto& m) -> const po::value_semantic* {
          using M = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<M, EnumMember>) {
            (*enum_texts)[i] = initial;
            return po::value(&(*enum_texts)[i])->default_value(initial, initial);
          } else if constexpr (std::is_same_v<M, bool TrainConfig::*>) {
            // `key = true|false|1|0` in files and `--key` or `--key true` on the command line,
            // as IBRNet's configargparse flags are written.
            return po::value(&(c->*m))->implicit_value(true)->default_value(defaults.*m);
          } else {
            auto* value = po::value(&(c->*m));
            return initial.empty() ? value : value->default_value(defaults.*m, initial);
          }
        },
        key.member);
    std::string help = key.help;
    if (const auto* e = std::get_if<EnumMember>(&key.member)) help = e->names + ": " + help;
    groups.at(key.group).add_options()(key.name, semantic, help.c_str());
    if (std::string(key.name) == "init_ckpt") {
      groups.at("run").add_options()(
          "resume", po::value(resume)->default_value(*resume),
          "auto | none | PATH: from the run's newest checkpoint, afresh (no_reload), or from PATH "
          "(ckpt_path)");
    }
  }
  po::options_description all;
  for (const char* group : kGroups) all.add(groups.at(group));
  return all;
}

void check(bool ok, const std::string& key, const std::string& what) {
  if (!ok) throw InvalidArgument("config key '" + key + "': " + what);
}

}  // namespace

bool parse_train_config(const std::vector<std::string>& args, TrainConfig* config) {
  std::string resume = kResumeFromNewest;
  std::vector<std::string> enum_texts;
  po::options_description all = options(config, &enum_texts, &resume);
  std::string file;
  po::options_description general("general");
  general.add_options()("help,h", "print this help")(
      "config", po::value(&file), "read `key = value` lines from this file (command line wins)");
  po::options_description command_line;
  command_line.add(general).add(all);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(command_line).run(), vm);
  } catch (const po::error& e) {
    throw InvalidArgument(std::string("command line: ") + e.what());
  }
  if (vm.count("help")) {
    std::cout << train_config_help();
    return false;
  }
  if (vm.count("config")) store_config_file(vm["config"].as<std::string>(), all, &vm);
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    throw InvalidArgument(e.what());
  }
  for (size_t i = 0; i < keys().size(); ++i) {
    if (const auto* e = std::get_if<EnumMember>(&keys()[i].member)) {
      check(e->set(*config, enum_texts[i]), keys()[i].name,
            "must be " + e->choices + ", got '" + enum_texts[i] + "'");
    }
  }
  if (resume == "none") {
    check(config->ckpt_path.empty(), "resume", "is none, but ckpt_path names a checkpoint");
    config->no_reload = true;
  } else if (resume != kResumeFromNewest) {
    check(config->ckpt_path.empty() || config->ckpt_path == resume, "resume",
          "names " + resume + ", but ckpt_path names " + config->ckpt_path);
    config->ckpt_path = resume;
  }
  for (const Key& key : keys()) {
    if (key.check.holds) check(key.check.holds(*config), key.name, key.check.requirement);
  }
  return true;
}

std::string train_config_help() {
  TrainConfig defaults;
  std::vector<std::string> enum_texts;
  std::string resume = kResumeFromNewest;
  std::ostringstream out;
  out << "usage: mvibr train --config FILE [--key value ...]\n\n"
      << options(&defaults, &enum_texts, &resume);
  return out.str();
}

std::vector<ConfigKeyName> train_config_keys() {
  std::vector<ConfigKeyName> names;
  for (const Key& key : keys()) names.push_back({key.name, key.in_text});
  return names;
}

std::string TrainConfig::to_text() const {
  std::string text;
  for (const Key& key : keys()) {
    if (key.in_text) text += std::string(key.name) + " = " + text_of(key.member, *this) + "\n";
  }
  return text;
}

}  // namespace mvibr::train
