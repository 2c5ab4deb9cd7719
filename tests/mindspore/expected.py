"""The differences between MindSpore 2.10 (CPU wheel) and mixprec that the conformance suite
expects, each with its reason. docs/amp.md's "Where mixprec differs" lists the same ids;
run_suite.py fails on a difference that is not here, and on an entry here that matches no
difference (then it was fixed: remove it here and in docs/amp.md).

An entry: id (named in docs/amp.md), program (a glob over program file names), keys (globs over
fact keys), optionally the `mindspore` and `mixprec` values it expects (ANY when absent; OneOf(...)
for a choice; ABSENT for a fact one side did not record), and why: what a user sees, whether
mixprec is right, and the fix when mixprec should change.
"""
ANY = object()
ABSENT = "<absent>"


class OneOf:
    def __init__(self, *values):
        self.values = values


RAISED = OneOf({"raises": "ValueError"}, {"raises": "TypeError"})

DIFFERENCES = [
    # ---------------------------------------------------------------- deliberate (mixprec is right)
    dict(id="default-low-dtype", program="p02_*", keys=["default.O2.cell.*", "default.O3.cell.*"],
         mindspore="float16", mixprec="bfloat16",
         why="The low dtype defaults to bfloat16 (the fast CPU type) where MindSpore defaults to float16; "
             "pass dtype=ms.float16 / cast_model_type=ms.float16 for the seed's."),
    dict(id="default-low-dtype", program="p17_*", keys=["*.cell.*"], mindspore="float16", mixprec="bfloat16",
         why="Model(amp_level=...) has no dtype keyword in MindSpore, so the default applies (see above)."),
    dict(id="bf16-everywhere", program="p02_*", keys=["bf16.*"],
         why="MindSpore's CPU kernels refuse bfloat16 (MatMul: 'Unsupported data type'); mixprec runs bf16 "
             "at every level."),
    dict(id="bf16-everywhere", program="p06_*", keys=["fc1_bf16_at_O0.*"],
         why="As above: to_float(bfloat16) on a Dense fails in MindSpore's CPU MatMul."),
    dict(id="bf16-everywhere", program="p12_*", keys=["bf16_finite"], mindspore={"raises": "TypeError"},
         mixprec=True, why="all_finite of a bfloat16 tensor: MindSpore's CPU isfinite refuses bf16."),
    dict(id="bf16-everywhere", program="p16_*", keys=["error.cast_model_type_bf16"], mindspore="TypeError",
         mixprec="none", why="build_train_network(cast_model_type=bfloat16) is refused by MindSpore."),
    dict(id="cpu-loss-scale", program="p16_*",
         keys=["O?.dynamic.*", "O?.fixed_drop.*", "default_manager.O2"],
         why="MindSpore refuses, on the CPU, every manager that needs its update cell (DynamicLossScaleManager, "
             "FixedLossScaleManager(drop_overflow_update=True), and O2's default dynamic one): 'Only "
             "loss_scale_manager=None or FixedLossScaleManager(drop_overflow_update=False) are supported on "
             "device CPU'. mixprec runs them all on the CPU."),
    dict(id="cpu-loss-scale", program="p17_*",
         keys=["O2.default.build", "O2.dynamic.build", "O2.fixed_drop.build", "O2.bn_f16.build"],
         mindspore={"raises": "ValueError"}, mixprec="ok", why="The same refusal through Model(amp_level='O2')."),
    dict(id="cpu-loss-scale", program="s5_*", keys=["model_o2_no_manager.build"],
         mindspore={"raises": "ValueError"}, mixprec="ok",
         why="The seed's Model(amp_level='O2') without a manager (O2's default dynamic manager) on the CPU."),
    dict(id="network-output-fp32", program="p17_*", keys=["*.output"], mindspore="float16", mixprec="float32",
         why="mixprec's Model/build_train_network cast the network's own output to float32 at O2/O3 (amp.md, "
             "Levels: 'network output: cast to fp32'), so net(x) and model.predict give float32; MindSpore "
             "casts only inside its loss wrapper, and net(x) stays float16."),
    dict(id="network-output-fp32", program="s5_*", keys=["predict.dtype"], mindspore="float16",
         mixprec="float32", why="model.predict after Model(amp_level='O2') (see above)."),
    dict(id="network-output-fp32", program="s2_*", keys=["logits_dtype", "step?.loss_dtype"],
         mindspore="float16", mixprec="float32",
         why="The seed's functional loop after build_train_network(level='O2'): the logits are float32 in "
             "mixprec, so loss_fn(logits) is float32; MindSpore computes the loss of float16 logits in float16."),
    dict(id="fixed-manager-unscales", program="p21_*", keys=["fixed1024.update_over_grad"],
         mindspore=[[1024.0, 1024.0]], mixprec=[[1.0, 1.0]],
         why="The seed's FixedLossScaleManager(1024, drop_overflow_update=False) without the optimizer's "
             "loss_scale=1024: MindSpore applies gradients 1024 times too large (the seed's bug); mixprec's "
             "train step unscales what it scaled (DESIGN.md, 'Two mistakes in the seed')."),
    dict(id="pynative-casts-every-op", program="p20_*", keys=["cast_inside_cell.finite"], mindspore=False,
         mixprec=True,
         why="In PYNATIVE_MODE MindSpore casts the inputs of every op of a flagged cell, so even the cast inside "
             "the custom softmax is undone; mixprec has one semantics, GRAPH_MODE's, in both modes (amp.md, "
             "'The explicit-cast rule'). In GRAPH_MODE (s3) the two agree on all four variants."),
    dict(id="to-float-before-level", program="p06_*", keys=["fc1_f32_at_O2.cell.fc1", "fc2_f32_at_O3.cell.fc2"],
         mindspore="float16", mixprec="float32",
         why="cell.to_float(float32) called BEFORE auto_mixed_precision: MindSpore's level then calls to_float "
             "on the whole network and overwrites it; in mixprec the user's to_float wins whenever it was called. "
             "Called after the level, both agree (fc*_after_O*)."),
    dict(id="to-float-f16-at-O0", program="p06_*", keys=["fc1_f16_at_O0.*"],
         why="to_float(float16) on one Dense of an O0 network: MindSpore casts the input but not the float32 "
             "weight and its MatMul raises TypeError (types differ); mixprec casts the weights too."),
    dict(id="manager-stays-in-f32", program="p09_*", keys=["huge.growth"],
         why="DynamicLossScaleManager keeps its scale in a Python float in MindSpore and grows it past float32's "
             "range (6.8e38); mixprec grows only while scale*factor is finite in float32."),
    dict(id="bn-running-stats", program="p01_*", keys=["O?.param.bn.moving_mean", "O?.param.bn.moving_variance"],
         mindspore="float32", mixprec=ABSENT,
         why="BatchNorm's running mean and variance are Parameters (requires_grad=False) in MindSpore and appear "
             "in parameters_dict(); in mixprec they are BatchNorm state, not parameters."),
    dict(id="op-name-lists", program="p07_*", keys=["*.names", "*.has_*"],
         why="get_white_list()/get_black_list() return op names in mixprec ('conv2d', 'linear', 'batch_norm', "
             "...; its lists are per op) where MindSpore returns cell and primitive classes (nn.Conv2d, "
             "P.MatMul, nn.BatchNorm2d), so `nn.Dense in amp.get_white_list()` is False. custom_mixed_precision "
             "accepts the classes in both."),
    dict(id="op-name-lists", program="s0_*", keys=["white_list.has_Conv2d", "black_list.has_BatchNorm2d"],
         mindspore=True, mixprec=False, why="The seed's table names Conv2d and BatchNorm: see above."),
    dict(id="grad-of-tuple-output", program="p13_*", keys=["no_aux_tuple.*"],
         why="value_and_grad of a function returning a tuple without has_aux: MindSpore differentiates the sum "
             "of all outputs (the aux output included, silently); mixprec refuses and asks for has_aux=True."),
    dict(id="overflow-stop-count", program="p09_*", keys=["stop.after_consecutive_overflows"],
         mindspore=[1001, "RuntimeError"], mixprec=[1000, "RuntimeError"],
         why="DynamicLossScaleManager stops training at the 1000th consecutive overflow in mixprec (DESIGN.md) "
             "and at the 1001st in MindSpore (bad_step > 1000)."),
    # ---------------------------------------------------------------- errors: which class
    dict(id="error-class", program="*", mixprec=OneOf("RuntimeError", {"raises": "RuntimeError"}),
         mindspore=OneOf("ValueError", "TypeError", {"raises": "ValueError"}, {"raises": "TypeError"}),
         keys=["custom.both_lists", "custom.no_list", "custom.not_a_cell", "custom.white_instance",
               "auto.bad_level", "auto.not_a_cell", "error.int32", "error.below_one", "error.zero",
               "error.negative", "error.window_zero", "error.factor_zero", "empty_tuple", "negative_position",
               "none_and_no_weights", "position_string", "corrupt_file", "missing_file", "error.bad_level",
               "error.manager_type", "seed_as_written.*"],
         why="mixprec's errors are mixprec.Error, a RuntimeError, where MindSpore raises ValueError (bad values) "
             "or TypeError (bad types); a wrong argument type that pybind11 cannot convert is a RuntimeError "
             "('Unable to cast Python instance'). `except ValueError` written for MindSpore misses them. Fix "
             "(python/src/module.cpp): make mixprec.Error derive from ValueError too, and translate "
             "pybind11::cast_error to TypeError."),
    dict(id="error-class", program="*", mixprec="TypeError", mindspore=OneOf("ValueError", "RuntimeError"),
         keys=["auto.level_int", "error.not_a_dtype", "weights_not_params", "error.unknown_kwarg"],
         why="A wrong argument type or keyword is Python's TypeError in mixprec (pybind11's); MindSpore's "
             "validators raise ValueError (or RuntimeError 'The pointer[tensor] is null'). mixprec is right."),
    # ---------------------------------------------------------------- mixprec accepts what MindSpore refuses
    dict(id="lenient-amp-arguments", program="p05_*",
         keys=["auto.dtype_float32", "auto.O0_dtype_float32", "custom.dtype_float32", "auto.lowercase_level"],
         mindspore="ValueError", mixprec="none",
         why="auto_mixed_precision / custom_mixed_precision accept dtype=float32 (MindSpore: 'The dtype should "
             "be one of (mstype.float16, mstype.bfloat16)') and a lower-case level 'o2'. Fix (src/amp or the "
             "binding): refuse both with a ValueError naming the choices."),
    dict(id="lenient-loss-scale-arguments", program="p09_*", keys=["error.init_below_one", "error.factor_one"],
         why="DynamicLossScaleManager: mixprec accepts init_loss_scale < 1 (MindSpore: ValueError) and refuses "
             "scale_factor 1 (MindSpore accepts it; the scale could then never change). Fix (src/amp/"
             "loss_scale.cpp): refuse init < 1 as FixedLossScaleManager already does."),
    dict(id="lenient-loss-scale-arguments", program="p1[01]_*",
         keys=["error.below_one", "error.factor_float", "adjust.python_bool"],
         mixprec=OneOf("none", [True, 4.0]),
         why="StaticLossScaler/DynamicLossScaler accept scale_value < 1 and a float scale_factor, and adjust() "
             "takes a Python bool (documented in docs/python.md); MindSpore refuses all three. Fix: refuse "
             "scale_value < 1 (ValueError) and a non-integer factor (TypeError) in the scalers."),
    dict(id="non-tensor-output", program="p14_*", keys=["int_output"], mindspore="none", mixprec="TypeError",
         why="value_and_grad of a function returning a Python int: MindSpore returns it with zero gradients; "
             "mixprec raises TypeError (nothing to differentiate). mixprec's refusal is deliberate."),
    dict(id="strict-load", program="p15_*", keys=["strict_partial"], mindspore="none", mixprec="RuntimeError",
         why="load_param_into_net(strict_load=True) with parameters missing: MindSpore's strict_load is about "
             "matching names exactly and returns the missing ones; mixprec's strict mode raises, naming them."),
    dict(id="cast-model-type-at-O0", program="p22_*", keys=["O0.cast_f16.cell.*"], mindspore="float16",
         mixprec="float32",
         why="build_train_network(level='O0', cast_model_type=float16): MindSpore casts the network to float16 "
             "(the keyword overrides the level); mixprec leaves an O0 network untouched (amp.md: 'At O0 neither "
             "Model nor build_train_network touches the network'). Fix if wanted (src/amp): apply "
             "cast_model_type as O3 would, or refuse the combination."),
    dict(id="model-cast-model-type", program="p17_*", keys=["O2.cast_model_type_kw.*"],
         why="Model(..., cast_model_type=...) is refused by MindSpore's Model (its kwargs are loss_scale_manager, "
             "keep_batchnorm_fp32, boost_config_dict, acc_level); mixprec's Model accepts it (it is how a Model "
             "user picks float16)."),
    # ---------------------------------------------------------------- mixprec should change (bugs)
    dict(id="scaler-return-kinds", program="p10_*", keys=["list.kind", "scale_value.kind"],
         why="scaler.scale([a, b]) returns a tuple in mixprec and a list in MindSpore; scale_value is a Python "
             "float in mixprec and a float32 Parameter in MindSpore (scale_value.asnumpy() fails in mixprec). "
             "Fix (binding): return the input's sequence type; a 0-d Tensor scale_value."),
    dict(id="scaler-return-kinds", program="p12_*", keys=["return_kind"], mindspore="Tensor", mixprec="bool",
         why="amp.all_finite returns a Python bool in mixprec (docs/python.md) and a bool Tensor in MindSpore; "
             "`if all_finite(g)` and adjust(all_finite(g)) work with both."),
]
