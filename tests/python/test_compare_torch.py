# bench/compare_torch.py's argument handling, its pure logic (bests, the slow rule, the rows, the
# CPU line) and its refusals and failures (a dying worker, skipped mixprec steps, through a
# stand-in for `mixprec bench`), with no PyTorch and no mixprec build: the script is imported.
import importlib.util
import json
import os

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "compare_torch.py")
spec = importlib.util.spec_from_file_location("compare_torch", SCRIPT)
ct = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ct)


def figure(side, precision, variant, rounds_ms, status="ok", version="2.9.0", floors_ms=()):
    return ct.Figure(side, precision, variant, version, list(rounds_ms), list(floors_ms), status)


def test_defaults_are_the_full_run():
    a = ct.parse_args([])
    assert a.models == list(ct.BATCH) and len(a.models) == 7
    assert (a.rounds, a.steps, a.threads, a.no_compile, a.json) == (3, 20, 2, False, "")
    assert a.mixprec == "build/tools/mixprec"


def test_quick_is_one_round_of_few_steps_on_two_models_unless_told_otherwise():
    a = ct.parse_args(["--quick"])
    assert (a.models, a.rounds, a.steps) == (ct.QUICK_MODELS, 1, ct.QUICK_STEPS)
    assert len(a.models) == 2 and a.steps < 20
    a = ct.parse_args(["--quick", "--models", "mlp", "--rounds", "2", "--steps", "7"])
    assert (a.models, a.rounds, a.steps) == (["mlp"], 2, 7)


def test_options_are_parsed():
    a = ct.parse_args(["--models", "vit-tiny,gpt-tiny", "--threads", "4", "--torch2", "none", "--no-compile",
                       "--json", "out.json", "--mixprec", "/x/mixprec"])
    assert a.models == ["vit-tiny", "gpt-tiny"]
    assert (a.threads, a.torch2, a.no_compile, a.json, a.mixprec) == (4, "none", True, "out.json", "/x/mixprec")


@pytest.mark.parametrize("argv", [["--models", "lenet,resnet"], ["--rounds", "0"], ["--steps", "0"],
                                  ["--threads", "0"], ["--steps", "many"]])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        ct.parse_args(argv)
    assert e.value.code == 2
    if argv[0] == "--models":
        assert "unknown model(s) resnet" in capsys.readouterr().err


def test_a_round_holds_every_configuration_and_fp32_comes_first_for_each_pytorch():
    figs = ct.plan_figures({"torch2": "2.9.0", "torch1": "1.13.0"}, compile_=True)
    keys = [f.key for f in figs]
    assert len(keys) == len(set(keys)) == 6 + 6 + 3  # mixprec 3x2, PyTorch 2.x 3x2, 1.13 3 eager
    for side in ("torch2", "torch1"):
        mine = [k for k in keys if k.startswith(side)]
        assert mine[0] == f"{side} fp32 eager"
    assert not any(k.startswith("torch1") and k.endswith("compile") for k in keys)
    assert [f.key for f in ct.round_order(figs, 1)] == keys[::-1]
    assert [f.key for f in ct.round_order(figs, 2)] == keys
    no_compile = ct.plan_figures({"torch2": "2.9.0"}, compile_=False)
    assert len(no_compile) == 6 + 3 and not any(f.variant == "compile" for f in no_compile)


def test_a_figure_is_the_min_over_rounds_of_the_medians_while_it_is_in():
    f = figure("mixprec", "O0", "graph", [12.0, 9.5, 11.0], floors_ms=[5.0, 4.75, 4.0])
    assert f.ms == 9.5 and f.floor_share() == pytest.approx(0.5)
    assert f.label == "O0 graph"
    f.status = "failed: boom"
    assert f.ms is None and f.floor_share() is None
    assert figure("torch2", "bf16", "compile", []).ms is None


def test_the_slow_rule_is_ten_times_the_own_fp32_step():
    assert ct.slow_factor(100.0, 10.0) is None  # exactly 10x is still timed
    assert ct.slow_factor(100.1, 10.0) == pytest.approx(10.01)
    assert ct.slow_factor(50.0, None) is None and ct.slow_factor(None, 10.0) is None


def test_best_skips_figures_out_of_the_race_and_compares_across_precisions():
    figs = [figure("mixprec", "O0", "pynative", [40.0]), figure("mixprec", "O2-bf16", "graph", [30.0, 25.0]),
            figure("mixprec", "O2-f16", "pynative", [10.0], status="refused: 3 timed steps skipped"),
            figure("torch2", "fp32", "eager", [47.0]),
            figure("torch2", "bf16", "eager", [5.0], status="emulated/slow: 12.0x fp32"),
            figure("torch1", "fp32", "eager", [45.0], version="1.13.0"),
            figure("torch2", "f16", "compile", [], status="failed: InductorError")]
    assert ct.best(figs, "mixprec").label == "O2-bf16 graph"
    assert ct.best(figs, "torch").label == "1.13.0 fp32"
    assert ct.best(figs[:3], "torch") is None


def test_summarize_and_format_a_row():
    figs = [figure("mixprec", "O2-bf16", "graph", [290.0], floors_ms=[58.0]),
            figure("torch2", "fp32", "compile", [142.0], version="2.15.0"),
            figure("torch2", "f16", "eager", [], status="emulated/slow: 31.0x fp32", version="2.15.0")]
    row = ct.summarize("vit-tiny", figs)
    assert row["best_vs_best"] == pytest.approx(142.0 / 290.0)  # PyTorch ms over mixprec ms
    assert row["mixprec_floor_share"] == pytest.approx(0.2)
    assert len(row["configs"]) == 3 and row["configs"][2]["ms"] is None
    assert ct.format_row(row) == ("| vit-tiny (128) | O2-bf16 graph | 290.0 | 2.15.0 fp32 compile | 142.0 "
                                  "| 0.49x | 0.20 |")
    assert ct.format_notes(row) == ["- vit-tiny: 2.15.0 f16 autocast: emulated/slow: 31.0x fp32"]
    assert ct.TABLE_HEADER.splitlines()[0].count("|") == ct.format_row(row).count("|")


def test_a_row_without_a_peer_shows_dashes():
    row = ct.summarize("lenet", [figure("mixprec", "O0", "pynative", [8.0])])
    assert row["torch_best"] is None and row["best_vs_best"] is None
    assert ct.format_row(row) == "| lenet (256) | O0 pynative | 8.0 | — | — | — | — |"


def test_cpu_flags_come_from_the_first_processor():
    info = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
            "flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile amx_bf16\n\n"
            "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n")
    cpu = ct.cpu_summary(info)
    assert cpu["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert [f for f, on in cpu["flags"].items() if on] == ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]
    line = ct.format_cpu(cpu)
    assert "has: avx2 avx512f avx512_bf16 amx_tile amx_bf16;" in line and line.endswith("lacks: avx512_fp16 amx_fp16")


def test_a_worker_that_dies_is_a_failure_not_a_crash():
    w = ct.TorchWorker("/bin/false", "lenet", ct.Figure("torch2", "bf16", "compile"), 1)
    try:
        assert w.info["error"] == "worker exited (1): no message"
    finally:
        w.close()


def fake_mixprec(tmp_path, skipped, rc=0, optimizer="Momentum"):
    """A stand-in for `mixprec bench --model lenet` that writes a report with `skipped` skipped
    steps and the recipe of a step with `optimizer`."""
    script = tmp_path / "mixprec"
    recipe = {"optimizer": optimizer, "lr": 0.01, "weight_decay": 0.0, "max_grad_norm": 0.0}
    report = {"skipped_steps": skipped, "step_ms_median": 12.5, "floor_ms": 5.0, "mixprec_version": "0",
              "cpu_features": "avx2", "recipe": recipe}
    script.write_text("#!/bin/sh\n"
                      f"[ {rc} = 0 ] || {{ echo 'error: no such model' >&2; exit {rc}; }}\n"
                      'while [ "$1" != --report ]; do shift; done\n'
                      f"echo '{json.dumps(report)}' > \"$2\"\n")
    script.chmod(0o755)
    return str(script)


def test_a_mixprec_run_with_skipped_timed_steps_is_refused(tmp_path):
    fig = ct.Figure("mixprec", "O2-bf16", "pynative")
    ok = ct.run_mixprec(fake_mixprec(tmp_path, skipped=ct.WARMUP), "lenet", fig, 3, 1)
    assert ok["step_ms_median"] == 12.5
    with pytest.raises(ct.Refused, match="1 timed steps skipped"):
        ct.run_mixprec(fake_mixprec(tmp_path, skipped=ct.WARMUP + 1), "lenet", fig, 3, 1)
    f16 = ct.Figure("mixprec", "O2-f16", "graph")  # its longer warm-up may skip more
    assert ct.run_mixprec(fake_mixprec(tmp_path, skipped=ct.MIXPREC_F16_WARMUP), "lenet", f16, 3, 1)
    with pytest.raises(RuntimeError, match="no such model"):
        ct.run_mixprec(fake_mixprec(tmp_path, skipped=0, rc=2), "lenet", fig, 3, 1)


def test_a_mixprec_step_unlike_the_peers_is_refused(tmp_path):
    """The peer runs each model's training optimizer (RECIPE): a mixprec report whose recipe
    names another one stops the comparison."""
    fig = ct.Figure("mixprec", "O2-bf16", "pynative")
    assert ct.RECIPE["lenet"] == ("Momentum", 0.01, 0.0, 0.0)
    with pytest.raises(RuntimeError, match="built .'AdamW'.*the peer runs .'Momentum'"):
        ct.run_mixprec(fake_mixprec(tmp_path, skipped=0, optimizer="AdamW"), "lenet", fig, 3, 1)
