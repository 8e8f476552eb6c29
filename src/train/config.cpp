// Training configuration by Boost.Program_options (see config.h). One table of options serves
// the config file, the command line, --help and to_text, so they cannot drift apart.
#include "mvibr/train/config.h"

#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>

#include "mvibr/core/config_file.h"
#include "mvibr/core/error.h"

namespace po = boost::program_options;

namespace mvibr::train {

namespace {

// Boolean keys read `key = true|false|1|0` in files and `--key` or `--key true` on the command
// line, as IBRNet's configargparse flags are written.
po::typed_value<bool>* flag(bool* target) {
  return po::value(target)->implicit_value(true)->default_value(*target);
}

// `resume` is the design's spelling of where a run starts (--resume auto | none | PATH); parsing
// turns it into ckpt_path and no_reload, IBRNet's keys.
constexpr const char* kResumeFromNewest = "auto";

po::options_description options(TrainConfig* c, std::string* resume) {
  po::options_description run("run");
  run.add_options()("expname", po::value(&c->expname)->default_value(c->expname),
                    "experiment name; the run directory is basedir/expname")(
      "basedir", po::value(&c->basedir)->default_value(c->basedir), "where runs are kept")(
      "datadir", po::value(&c->datadir), "a folder written by `mvibr prep` (required)")(
      "seed", po::value(&c->seed)->default_value(c->seed), "seed of initialisation and sampling")(
      "n_iters", po::value(&c->n_iters)->default_value(c->n_iters), "training steps")(
      "i_print", po::value(&c->i_print)->default_value(c->i_print), "steps between log lines")(
      "i_img", po::value(&c->i_img)->default_value(c->i_img), "steps between validation images")(
      "i_weights", po::value(&c->i_weights)->default_value(c->i_weights),
      "steps between checkpoints")(
      "keep_checkpoints", po::value(&c->keep_checkpoints)->default_value(c->keep_checkpoints),
      "checkpoints kept in the run directory")("ckpt_path", po::value(&c->ckpt_path),
                                               "resume from this checkpoint")(
      "no_reload", flag(&c->no_reload), "start fresh even if the run has checkpoints")(
      "resume", po::value(resume)->default_value(*resume),
      "auto | none | PATH: from the run's newest checkpoint, afresh (no_reload), or from PATH "
      "(ckpt_path)")(
      "init_ckpt", po::value(&c->init_ckpt),
      "a new run's initial weights (fresh optimiser, step 0); unused once the run has "
      "checkpoints");
  po::options_description data("data");
  data.add_options()("N_rand", po::value(&c->N_rand)->default_value(c->N_rand),
                     "rays per step per rank")(
      "chunk_size", po::value(&c->chunk_size)->default_value(c->chunk_size),
      "rays per chunk when rendering")(
      "num_source_views", po::value(&c->num_source_views)->default_value(c->num_source_views),
      "source views per target")("source_pool",
                                 po::value(&c->source_pool)->default_value(c->source_pool),
                                 "sources are drawn from this many nearest views")(
      "sample_mode", po::value(&c->sample_mode)->default_value(c->sample_mode),
      "uniform | center: where target pixels are drawn")(
      "center_ratio", po::value(&c->center_ratio)->default_value(c->center_ratio),
      "center sampling: the central fraction of the image")(
      "queue_depth", po::value(&c->queue_depth)->default_value(c->queue_depth),
      "samples the reader prefetches");
  po::options_description model("model");
  model.add_options()("feature_net", po::value(&c->feature_net)->default_value(c->feature_net),
                      "ibrnet | small")(
      "coarse_feat_dim", po::value(&c->coarse_feat_dim)->default_value(c->coarse_feat_dim),
      "coarse feature channels")(
      "fine_feat_dim", po::value(&c->fine_feat_dim)->default_value(c->fine_feat_dim),
      "fine feature channels")("coarse_only", flag(&c->coarse_only), "no fine network")(
      "anti_alias_pooling", flag(&c->anti_alias_pooling), "IBRNet's anti-alias pooling")(
      "N_samples", po::value(&c->N_samples)->default_value(c->N_samples), "coarse samples per ray")(
      "N_importance", po::value(&c->N_importance)->default_value(c->N_importance),
      "importance samples per ray")("inv_uniform", flag(&c->inv_uniform),
                                    "sample uniformly in inverse depth")(
      "det", flag(&c->det), "deterministic samples")("white_bkgd", flag(&c->white_bkgd),
                                                     "composite on white")(
      "delta", po::value(&c->delta)->default_value(c->delta), "unit (IBRNet) | interval (NeRF)")(
      "device", po::value(&c->device)->default_value(c->device),
      "auto | cpu | cuda: where the step runs (auto: a GPU when there is one)")(
      "precision", po::value(&c->precision)->default_value(c->precision),
      "fp32 | bf16 | fp16: the GPU step's GEMMs (fp32 weights, activations and gradients)")(
      "loss_scale", po::value(&c->loss_scale)->default_value(c->loss_scale),
      "fp16: the initial dynamic loss scale")(
      "loss_scale_window", po::value(&c->loss_scale_window)->default_value(c->loss_scale_window),
      "fp16: finite steps in a row before the loss scale doubles");
  po::options_description optimisation("optimisation");
  optimisation.add_options()("lrate_feature",
                             po::value(&c->lrate_feature)->default_value(c->lrate_feature),
                             "learning rate of the feature network")(
      "lrate_mlp", po::value(&c->lrate_mlp)->default_value(c->lrate_mlp),
      "learning rate of the aggregation networks")(
      "lrate_decay_factor", po::value(&c->lrate_decay_factor)->default_value(c->lrate_decay_factor),
      "learning-rate decay factor")(
      "lrate_decay_steps", po::value(&c->lrate_decay_steps)->default_value(c->lrate_decay_steps),
      "steps between decays")("grad_clip", po::value(&c->grad_clip)->default_value(c->grad_clip),
                              "max global gradient norm (0: off)");
  po::options_description distributed("data-parallel (mpirun / srun: one rank per core or GPU)");
  distributed.add_options()("accumulation_steps",
                            po::value(&c->accumulation_steps)->default_value(c->accumulation_steps),
                            "micro-steps of N_rand rays per rank before each update")(
      "lr_scaling", po::value(&c->lr_scaling)->default_value(c->lr_scaling),
      "none | linear | sqrt: learning rates times ranks, or its square root")(
      "bucket_mb", po::value(&c->bucket_mb)->default_value(c->bucket_mb),
      "gradient all-reduce bucket size in MB")(
      "overlap_allreduce", flag(&c->overlap_allreduce),
      "all-reduce gradient buckets during the backward pass")(
      "allreduce_dtype", po::value(&c->allreduce_dtype)->default_value(c->allreduce_dtype),
      "fp32 | bf16: gradients travel as float or bfloat16 (half the bytes)")(
      "watchdog_s", po::value(&c->watchdog_s)->default_value(c->watchdog_s),
      "seconds a rank may wait for the others before the job is ended")(
      "nan_policy", po::value(&c->nan_policy)->default_value(c->nan_policy),
      "skip | stop: on a non-finite loss or gradient, skip the update, or checkpoint the last "
      "good state and stop")("allow_shared_shards", flag(&c->allow_shared_shards),
                             "let ranks share shards when there are fewer shards than ranks");
  po::options_description all;
  all.add(run).add(data).add(model).add(optimisation).add(distributed);
  return all;
}

void check(bool ok, const std::string& key, const std::string& what) {
  if (!ok) throw InvalidArgument("config key '" + key + "': " + what);
}

void validate(const TrainConfig& c) {
  check(!c.datadir.empty(), "datadir", "is required (a folder written by mvibr prep)");
  check(!c.expname.empty() && c.expname.find('/') == std::string::npos, "expname",
        "must be a non-empty name without '/'");
  check(c.n_iters >= 0, "n_iters", "must be >= 0");
  check(c.i_print >= 1 && c.i_img >= 1 && c.i_weights >= 1, "i_print/i_img/i_weights",
        "must be >= 1");
  check(c.keep_checkpoints >= 1, "keep_checkpoints", "must be >= 1");
  check(c.N_rand >= 1, "N_rand", "must be >= 1");
  check(c.chunk_size >= 1, "chunk_size", "must be >= 1");
  check(c.num_source_views >= 1, "num_source_views", "must be >= 1");
  check(c.source_pool >= c.num_source_views, "source_pool", "must be >= num_source_views");
  check(c.sample_mode == "uniform" || c.sample_mode == "center", "sample_mode",
        "must be uniform or center, got '" + c.sample_mode + "'");
  check(c.center_ratio > 0 && c.center_ratio <= 1, "center_ratio", "must be in (0, 1]");
  check(c.queue_depth >= 1, "queue_depth", "must be >= 1");
  check(c.feature_net == "ibrnet" || c.feature_net == "small", "feature_net",
        "must be ibrnet or small, got '" + c.feature_net + "'");
  check(c.coarse_feat_dim >= 1 && c.fine_feat_dim >= 1, "coarse_feat_dim/fine_feat_dim",
        "must be >= 1");
  check(c.N_samples >= 1, "N_samples", "must be >= 1");
  check(c.N_importance >= 0, "N_importance", "must be >= 0");
  check(c.coarse_only || c.N_importance == 0 || c.N_samples >= 3, "N_samples",
        "must be >= 3 for importance sampling");
  check(c.delta == "unit" || c.delta == "interval", "delta",
        "must be unit or interval, got '" + c.delta + "'");
  check(c.device == "auto" || c.device == "cpu" || c.device == "cuda", "device",
        "must be auto, cpu or cuda, got '" + c.device + "'");
  check(c.precision == "fp32" || c.precision == "bf16" || c.precision == "fp16", "precision",
        "must be fp32, bf16 or fp16, got '" + c.precision + "'");
  check(c.precision == "fp32" || c.device != "cpu", "precision",
        c.precision + " needs the GPU step; device = cpu is fp32 only");
  check(c.loss_scale > 0, "loss_scale", "must be > 0");
  check(c.loss_scale_window >= 1, "loss_scale_window", "must be >= 1");
  check(c.lrate_feature >= 0 && c.lrate_mlp >= 0, "lrate_feature/lrate_mlp", "must be >= 0");
  check(c.lrate_decay_factor > 0 && c.lrate_decay_steps >= 1,
        "lrate_decay_factor/lrate_decay_steps", "must be positive");
  check(c.grad_clip >= 0, "grad_clip", "must be >= 0");
  check(c.accumulation_steps >= 1, "accumulation_steps", "must be >= 1");
  check(c.lr_scaling == "none" || c.lr_scaling == "linear" || c.lr_scaling == "sqrt", "lr_scaling",
        "must be none, linear or sqrt, got '" + c.lr_scaling + "'");
  check(c.bucket_mb > 0, "bucket_mb", "must be > 0");
  check(c.watchdog_s > 0, "watchdog_s", "must be > 0");
  check(c.allreduce_dtype == "fp32" || c.allreduce_dtype == "bf16", "allreduce_dtype",
        "must be fp32 or bf16, got '" + c.allreduce_dtype + "'");
  check(c.nan_policy == "skip" || c.nan_policy == "stop", "nan_policy",
        "must be skip or stop, got '" + c.nan_policy + "'");
}

}  // namespace

bool parse_train_config(const std::vector<std::string>& args, TrainConfig* config) {
  std::string resume = kResumeFromNewest;
  po::options_description all = options(config, &resume);
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
  if (resume == "none") {
    check(config->ckpt_path.empty(), "resume", "is none, but ckpt_path names a checkpoint");
    config->no_reload = true;
  } else if (resume != kResumeFromNewest) {
    check(config->ckpt_path.empty() || config->ckpt_path == resume, "resume",
          "names " + resume + ", but ckpt_path names " + config->ckpt_path);
    config->ckpt_path = resume;
  }
  validate(*config);
  return true;
}

std::string train_config_help() {
  TrainConfig defaults;
  std::string resume = kResumeFromNewest;
  std::ostringstream out;
  out << "usage: mvibr train --config FILE [--key value ...]\n\n" << options(&defaults, &resume);
  return out.str();
}

std::string TrainConfig::to_text() const {
  std::ostringstream out;
  out.precision(17);
  out << "expname = " << expname << "\nbasedir = " << basedir << "\ndatadir = " << datadir
      << "\nseed = " << seed << "\nn_iters = " << n_iters << "\ni_print = " << i_print
      << "\ni_img = " << i_img << "\ni_weights = " << i_weights
      << "\nkeep_checkpoints = " << keep_checkpoints << "\nN_rand = " << N_rand
      << "\nchunk_size = " << chunk_size << "\nnum_source_views = " << num_source_views
      << "\nsource_pool = " << source_pool << "\nsample_mode = " << sample_mode
      << "\ncenter_ratio = " << center_ratio << "\nqueue_depth = " << queue_depth
      << "\nfeature_net = " << feature_net << "\ncoarse_feat_dim = " << coarse_feat_dim
      << "\nfine_feat_dim = " << fine_feat_dim << "\ncoarse_only = " << coarse_only
      << "\nanti_alias_pooling = " << anti_alias_pooling << "\nN_samples = " << N_samples
      << "\nN_importance = " << N_importance << "\ninv_uniform = " << inv_uniform
      << "\ndet = " << det << "\nwhite_bkgd = " << white_bkgd << "\ndelta = " << delta
      << "\ndevice = " << device << "\nprecision = " << precision << "\nloss_scale = " << loss_scale
      << "\nloss_scale_window = " << loss_scale_window << "\nlrate_feature = " << lrate_feature
      << "\nlrate_mlp = " << lrate_mlp << "\nlrate_decay_factor = " << lrate_decay_factor
      << "\nlrate_decay_steps = " << lrate_decay_steps << "\ngrad_clip = " << grad_clip
      << "\naccumulation_steps = " << accumulation_steps << "\nlr_scaling = " << lr_scaling
      << "\nbucket_mb = " << bucket_mb << "\noverlap_allreduce = " << overlap_allreduce
      << "\nallreduce_dtype = " << allreduce_dtype << "\nwatchdog_s = " << watchdog_s
      << "\nnan_policy = " << nan_policy << "\nallow_shared_shards = " << allow_shared_shards
      << "\n";
  return out.str();
}

}  // namespace mvibr::train
