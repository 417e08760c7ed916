"""Hydra composition: shipped experiments compose, overrides are type-checked, specs load."""

import math
import os
from pathlib import Path

import pytest
import yaml
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from sweep.analysis.hardware import available, load_spec
from sweep.plan import plan_from_config
from sweep.space import grid_of
from tests.helpers import compose_cfg
from zoo import ModelConfig, presets

CONF = Path(__file__).resolve().parent.parent / "conf"


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "model").glob("*.yaml")))
def test_model_yaml_matches_preset(name):
    d = yaml.safe_load((CONF / "model" / f"{name}.yaml").read_text())
    assert ModelConfig.from_dict(d) == ModelConfig.from_name(name)


def test_every_preset_has_a_model_yaml():
    assert sorted(presets()) == sorted(p.stem for p in (CONF / "model").glob("*.yaml"))


@pytest.mark.parametrize("exp", ["gqa_vs_mha", "head_dim", "ffn_width", "depth_vs_width",
                                 "kv_quant"])
def test_experiments_compose_on_the_gpu_base(exp, monkeypatch):
    cfg = compose_cfg([f"+experiment={exp}", "device=cpu", "cpu.enabled=false"])
    assert cfg.model.name == "llama3_2_1b"
    plan = plan_from_config(cfg)
    grid = grid_of(plan.space, plan.base)
    assert grid and math.prod(map(len, grid.values())) >= 3
    assert plan.name.startswith(exp + "-llama3_2_1b-cpu-")
    # every design of the GPU space is valid
    from sweep.space import WORKLOAD_KEYS

    for key, values in grid.items():
        for v in values:
            bundle = plan.space[key]["choices"][v] if isinstance(
                plan.space[key].get("choices"), dict) else {key: v}
            plan.base.replace(**{k: x for k, x in bundle.items() if k not in WORKLOAD_KEYS}
                              ).validate()


@pytest.mark.parametrize("exp", ["moe_vs_dense", "moe_granularity"])
def test_moe_experiments_draw_experts_as_a_trained_router_spreads_them(exp):
    """The MoE-against-MoE experiments measure under ``workload.routing=uniform`` (the random
    router as built sends a long prompt to a quarter of the experts, flattering every MoE
    design's prefill), and it is in the study's identity; the command line can set it back."""
    plan = plan_from_config(compose_cfg([f"+experiment={exp}", "device=cpu", "cpu.enabled=false"]))
    assert plan.workload["routing"] == "uniform" and plan.workload["routing_skew"] == 0
    back = plan_from_config(compose_cfg([f"+experiment={exp}", "device=cpu", "cpu.enabled=false",
                                         "workload.routing=router"]))
    assert back.workload["routing"] == "router" and back.name != plan.name


def test_gqa_space_is_divisors_of_n_heads():
    plan = plan_from_config(compose_cfg(["+experiment=gqa_vs_mha", "device=cpu",
                                         "cpu.enabled=false"]))
    assert grid_of(plan.space, plan.base) == {"n_kv_heads": [1, 2, 4, 8, 16, 32]}
    assert plan.workload["prompt_len"] == 4096 and plan.workload["batch"] == 8


def test_a_dropped_constraint_is_dropped_on_the_cpu_fallback_too():
    """ffn_width's budget has a tiny-model counterpart (``constraints_cpu``); dropping the budget
    drops both (it pruned the CPU's designs after the user had removed it)."""
    kept = plan_from_config(compose_cfg(["+experiment=ffn_width", "device=cpu", "quiet=true"]))
    assert kept.constraints == {"params_non_embedding": {"high": 6.0e5}}
    dropped = plan_from_config(compose_cfg(["+experiment=ffn_width", "device=cpu", "quiet=true",
                                            "~experiment.constraints.params_non_embedding"]))
    assert dropped.constraints == {} and dropped.shadow["constraints"] == {}


def test_depth_vs_width_holds_params_near_constant():
    from zoo import counts

    plan = plan_from_config(compose_cfg(["+experiment=depth_vs_width", "device=cpu",
                                         "cpu.enabled=false"]))
    sizes = [counts.params(plan.base.replace(**b)).non_embedding
             for b in plan.space["shape"]["choices"].values()]
    assert max(sizes) / min(sizes) < 1.2


def test_usual_overrides_work():
    cfg = compose_cfg(["model=llama3_1_8b", "workload.batch=8", "study.n_trials=20",
                       "model.n_kv_heads=4"])
    assert cfg.model.d_model == 4096 and cfg.workload.batch == 8 and cfg.study.n_trials == 20
    assert cfg.model.n_kv_heads == 4


def test_wrong_type_and_unknown_key_are_refused():
    with pytest.raises((ValidationError, ConfigCompositionException), match="batch"):
        compose_cfg(["workload.batch=eight"])
    with pytest.raises((ConfigKeyError, ConfigCompositionException), match="batchsize"):
        compose_cfg(["workload.batchsize=8"])
    with pytest.raises(ConfigCompositionException, match="experiment"):
        compose_cfg(["+experiment=nope"])


def test_unknown_objective_and_model_field():
    with pytest.raises(ValueError, match="unknown objective.*tokens_per_s"):
        plan_from_config(compose_cfg(["study.objectives=[tokens_per_s,params_total]"]))
    from zoo import DesignError

    with pytest.raises(DesignError, match="n_kv_head"):
        plan_from_config(compose_cfg(["+model.n_kv_head=2", "cpu.enabled=false",
                                      "device=cpu"]))


@pytest.mark.parametrize("over,cpu,starts", [
    (["model.n_heads=7"], False, "model.n_kv_heads (8) must not exceed n_heads (7)"),
    (["model.kv_dtype=int4"], False, "model.kv_dtype='int4' is not one of"),
    (["+model.n_experts=8", "+model.n_experts_active=10", "+model.expert_ffn_dim=64"], False,
     "model.n_experts_active (10) must not exceed n_experts (8)"),
    (["model.n_kv_heads=16"], True, "model.n_kv_heads (16) must not exceed n_heads (8) (the CPU "
     "fallback applies")])
def test_a_bad_model_field_is_named_as_the_override(over, cpu, starts):
    """A design refused by its config names the field as the user typed it (``model.FIELD``),
    on the configured model and on the CPU fallback's."""
    from zoo import DesignError

    with pytest.raises(DesignError) as e:
        plan_from_config(compose_cfg(over + ["device=cpu", f"cpu.enabled={str(cpu).lower()}"]))
    assert str(e.value).startswith(starts), str(e.value)


def test_with_prefix_names_only_a_leading_field():
    from zoo.errors import with_prefix

    names = {"n_heads", "kv_dtype"}
    assert with_prefix("n_heads (7) must", names, "model.") == "model.n_heads (7) must"
    assert with_prefix("kv_dtype='x' is not", names, "model.") == "model.kv_dtype='x' is not"
    assert with_prefix("n_heads must be", names, "model.") == "model.n_heads must be"
    for other in ("workload.prompt_len + 1", "the design needs 7 GB", "n_headsx (1)"):
        assert with_prefix(other, names, "model.") == other


@pytest.mark.parametrize("device,spec", [
    ("NVIDIA H100 80GB HBM3", "h100_sxm"), ("NVIDIA H100 PCIe", "h100_pcie"),
    ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-80GB", "a100_80gb"),
    # the PCIe card has its own figures (1935 GB/s, 300 W): it took the SXM card's (2039, 400)
    ("NVIDIA A100 80GB PCIe", "a100_80gb_pcie"), ("NVIDIA L4", "l4"), ("cpu", "cpu"),
    ("NVIDIA B200", "b200")])
def test_hardware_auto_matches_device_names(device, spec):
    assert load_spec("auto", device).name == spec


@pytest.mark.parametrize("device", ["NVIDIA GH200 480GB", "NVIDIA H200 NVL", "NVIDIA GB200"])
def test_hardware_auto_takes_no_spec_of_another_product(device):
    # "H200" and "B200" are inside these names: their MFU, MBU and memory checks ran against
    # another product's datasheet (the NVL card draws 600 W, the GB200 1200 W)
    from sweep.analysis.hardware import UnknownHardware

    with pytest.raises(UnknownHardware, match="no hardware spec matches"):
        load_spec("auto", device)


def test_hardware_specs_are_complete():
    assert {"h100_sxm", "h100_pcie", "h200", "a100_80gb", "l4", "cpu"} <= set(available())
    h100 = load_spec("h100_sxm")
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12)
    assert h100.peak_bytes_s == pytest.approx(3.35e12)
    assert math.isnan(load_spec("cpu").peak_flops("fp32"))
    with pytest.raises(KeyError, match="no hardware spec matches device 'Tesla K80'"):
        load_spec("auto", "Tesla K80")


def test_workers_on_the_cpu_are_said_to_measure_beside_each_other(capsys):
    plan_from_config(compose_cfg(["+experiment=gqa_vs_mha", "device=cpu", "sweep.workers=2"]))
    assert "sweep.workers=2 on the CPU: the workers share its cores" in capsys.readouterr().out


def test_hardware_fields_and_directions_enter_the_identity_only_when_changed(tmp_path):
    """A ``hardware.FIELD=`` override and directions other than the objectives' own start a new
    study (they had been left out of the identity: a second command resumed the first study's
    rows under another memory size, or stopped on Optuna's "exists with other directions");
    a value equal to the spec file's, and the shipped experiments, keep their names."""
    base = [f"results_dir={tmp_path}", "quiet=true", "study.predict=true", "hardware=h200"]

    def name(*extra):
        return plan_from_config(compose_cfg(base + list(extra))).name

    plain = name()
    assert name("hardware.memory_gb=1") != plain
    assert name(f"hardware.memory_gb={load_spec('h200').memory_gb}") == plain
    assert name("study.directions=[maximize,minimize]") != plain
    assert name("study.directions=[maximize,maximize]") == plain  # decode_tok_s, params: max


@pytest.mark.parametrize("override,field", [
    ("hardware.memory_gb=abc", "hardware.memory_gb"), ("+hardware.foo=1", "foo"),
    ("hardware.hbm_gb_s=-5", "hardware.hbm_gb_s"), ("hardware.hbm_gb_s=0", "hardware.hbm_gb_s"),
    ("hardware.peak_tflops.bf16=-1", "hardware.peak_tflops.bf16"),
    ("hardware.sm_count=1.5", "hardware.sm_count"), ("+hardware.kind=tpu", "hardware.kind"),
    ("hardware.peak_tflops=5", "hardware.peak_tflops"), ("hardware.match=5", "hardware.match"),
    ("hardware.memory_gb=inf", "hardware.memory_gb"),
    # priced a negative TTFT, a time below the datasheet floor, or a ZeroDivisionError per row
    ("hardware.assumptions.launch_us=-100", "hardware.assumptions.launch_us"),
    ("hardware.assumptions.compute_efficiency=5", "hardware.assumptions.compute_efficiency"),
    ("hardware.assumptions.bandwidth_efficiency=0", "hardware.assumptions.bandwidth_efficiency"),
    ("hardware.assumptions.compute_efficiency=abc", "hardware.assumptions.compute_efficiency")])
def test_bad_hardware_fields_are_refused_by_name(tmp_path, override, field):
    # they had ended in a TypeError's traceback, or were taken (a negative bandwidth priced)
    cfg = compose_cfg([f"results_dir={tmp_path}", "quiet=true", "study.predict=true",
                       "hardware=h200", override])
    with pytest.raises(ValueError, match=field):
        plan_from_config(cfg)


@pytest.mark.parametrize("over,message", [
    ({"fitted": {"decode": {"fraction": 0}}}, "hardware.fitted.decode.fraction=0"),
    ({"fitted": {"decode": {"loo_half_width_pct": -150}}}, "fitted.decode.loo_half_width_pct"),
    ({"hbm_gbs": 3000}, "unknown hardware field(s): hbm_gbs"),
    ({"hbm_gb_s": -2000.0}, "hardware.hbm_gb_s=-2000.0 must be a positive number"),
])
def test_a_spec_file_is_checked_as_a_commands_overrides_are(tmp_path, monkeypatch, over, message):
    # whatif and advise read spec files directly: a negative bandwidth was "transferred", a typo
    # or a zero fraction a traceback
    import yaml

    from sweep.analysis import hardware

    d = yaml.safe_load((hardware.HW_DIR / "m3_max.yaml").read_text())
    for k, v in over.items():
        d[k] = ({**d[k], "decode": {**d[k]["decode"], **v["decode"]}} if k == "fitted" else v)
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(d))
    monkeypatch.setattr(hardware, "HW_DIR", tmp_path)
    with pytest.raises(ValueError) as e:
        hardware.load_spec("mine")
    assert message in str(e.value) and "mine.yaml" in str(e.value)


def test_every_shipped_spec_passes_the_checks():
    from sweep.analysis.hardware import spec_from_config

    for name in available():
        assert spec_from_config(yaml.safe_load((Path("conf/hardware") / f"{name}.yaml")
                                               .read_text())).name == name


@pytest.mark.parametrize("arg,said", [
    ("+study.n_trails=3", "study has no field 'n_trails' (did you mean study.n_trials?)"),
    ("++study.n_trals=3", "did you mean study.n_trials?"), ("+foo=bar", "the config has no field"),
    ("+experiment.foo=1", "experiment has no field 'foo'"), ("+cpu.foo=1", "cpu has no field"),
    ("+cpu.workload.batchh=2", "cpu.workload has no field 'batchh'")])
def test_an_appended_key_the_schema_lacks_is_refused(arg, said):
    # Hydra's "+" adds a key to any group: +study.n_trails=3 ran the default trial count, exit 0
    from sweep.config.overrides import unknown_appended

    assert said in unknown_appended(["+experiment=gqa_vs_mha", arg])


def test_appended_keys_the_schema_takes_pass():
    from sweep.config.overrides import unknown_appended

    assert unknown_appended(["+experiment=moe_vs_dense", "+model.n_experts=8",
                             "+hardware.kind=gpu", "+experiment.space.n_kv_heads.choices=[1,2]",
                             "+experiment.constraints.params_total.low=1", "++study.n_trials=3",
                             "+profile.options.ncu.set=full", "study.name=x"]) is None


def test_a_config_json_on_the_command_line(tmp_path, monkeypatch):
    """``+model.hf_config=PATH`` reads a config.json as transformers writes it, the command's
    other model fields over it; a model group of no preset that leaves its shape unset is refused
    (it ran as the default design under the name it gave), a preset's name fills the rest."""
    import json

    from sweep.config.overrides import model_group

    hf = ModelConfig.from_name("olmoe_1b_7b").to_hf()
    (tmp_path / "config.json").write_text(json.dumps(hf))
    fields, over = model_group({"name": "llama3_2_1b", "n_layers": 4, "hf_config": str(tmp_path)},
                               {"n_layers", "hf_config"})
    assert fields["n_experts"] == 64 and fields["n_layers"] == 4 and over == {"n_layers": 4}
    with pytest.raises(ValueError, match="model.hf_config=.*no such file"):
        model_group({"hf_config": str(tmp_path / "nosuch.json")})
    with pytest.raises(ValueError, match="sets no model.d_model"):
        model_group({"name": "mixtral_8x22b"})
    fields, _ = model_group({"name": "olmoe_1b_7b", "n_layers": 2})
    assert fields["n_experts"] == 64 and fields["n_layers"] == 2
    cfg = compose_cfg([f"results_dir={tmp_path}", "quiet=true", "study.predict=true",
                       "hardware=h200", f"+model.hf_config={tmp_path / 'config.json'}",
                       "model.n_layers=4"])  # composed outside the app (advise): none named
    base = plan_from_config(cfg).base
    assert base.n_experts == 64 and base.n_layers == 4
    # "+model.hf_config=$CFG" with $CFG unset ran the default preset; a folder named 123 (a
    # checkpoint's step) came from Hydra as an int: a TypeError's traceback
    for empty in ("", None, ["a", "b"]):
        with pytest.raises(ValueError, match="model.hf_config=.* is not a path"):
            model_group({"name": "llama3_2_1b", "hf_config": empty}, {"hf_config"})
    (tmp_path / "123").mkdir()
    (tmp_path / "123" / "config.json").write_text(json.dumps(hf))
    monkeypatch.chdir(tmp_path)
    assert model_group({"hf_config": 123}, {"hf_config"})[0]["n_experts"] == 64


def test_an_unstated_figure_is_no_change_of_the_spec():
    # NaN (a figure the datasheet does not state) read twice is two NaNs: not an override
    from sweep.analysis.hardware import HardwareSpec
    from sweep.config.identity import changed_from_defaults

    b200 = load_spec("b200")
    assert math.isnan(b200.l2_mb)
    again = HardwareSpec(**{**b200.__dict__, "l2_mb": float("nan")})
    assert "hardware_fields" not in changed_from_defaults(again, ["decode_tok_s"], ["maximize"])
    more = HardwareSpec(**{**b200.__dict__, "memory_gb": 64})
    assert changed_from_defaults(more, ["decode_tok_s"], ["maximize"])["hardware_fields"] == {
        "memory_gb": 64}


def test_an_appended_key_is_refused_with_flags_too():
    from sweep.config.overrides import refuse_bad_overrides

    for argv in (["-m", "+study.n_trails=1"], ["hydra.job.chdir=false", "+study.n_trails=1"]):
        with pytest.raises(SystemExit) as e:
            refuse_bad_overrides(argv)
        assert e.value.code == 2
    assert refuse_bad_overrides(["-m", "+hydra.job.env_set.X=1", "study.n_trials=1"]) is None


def test_a_relative_config_json_is_read_from_the_commands_folder(tmp_path, monkeypatch):
    # a path relative to the folder the command runs in (it was read from designzoo's own,
    # and the refusal did not say where it had looked)
    import json

    from sweep.config.overrides import model_group

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(ModelConfig.from_name("qwen3_30b_a3b")
                                                           .to_hf()))
    monkeypatch.chdir(tmp_path)
    fields, _ = model_group({"hf_config": "m/config.json"})
    assert fields["n_experts"] == 128 and fields["head_dim"] == 128
    with pytest.raises(ValueError, match=f"looked for {tmp_path / 'nosuch'}"):
        model_group({"hf_config": "nosuch"})


def test_a_config_jsons_impossible_design_names_its_keys_and_file(tmp_path):
    # the refusal named the zoo's fields (n_kv_heads) where the file says num_key_value_heads
    import json

    from sweep.config.overrides import model_group
    from zoo.errors import DesignError

    hf = ModelConfig.from_name("llama3_2_1b").to_hf()
    (tmp_path / "config.json").write_text(json.dumps(dict(hf, num_key_value_heads=5)))
    with pytest.raises(DesignError, match=rf"{tmp_path}.*n_heads/num_attention_heads \(32\) must "
                                          r"be a multiple of n_kv_heads/num_key_value_heads \(5\)"):
        model_group({"hf_config": str(tmp_path)})
    # the command's own field, named as the command set it (the file alone had been blamed)
    with pytest.raises(DesignError, match=rf"{tmp_path} with model.n_kv_heads=5: .*of "
                                          r"n_kv_heads \(5\)"):
        model_group({"name": "llama3_2_1b", "n_kv_heads": 5, "hf_config": str(tmp_path)},
                    {"n_kv_heads", "hf_config"})
    (tmp_path / "notes.md").write_text("# not JSON")  # the file named once, not twice
    with pytest.raises(DesignError) as e:
        model_group({"hf_config": str(tmp_path / "notes.md")})
    assert str(e.value).count("notes.md") == 1


@pytest.mark.parametrize("entry,message", [
    # each went past the plan: a traceback (TypeError from open_study, AttributeError per
    # trial), a string split into its letters, every trial FAILed by Optuna's unnamed message,
    # or a nonexistent mode priced
    ("n_kv_heads={choices:5}", "experiment.space.n_kv_heads.choices=5 must be a list"),
    ("n_kv_heads={choices:abc}", "choices='abc' must be a list"),
    ("n_kv_heads={low:16,high:2}", "experiment.space.n_kv_heads: low=16 is above high=2"),
    ("n_kv_heads={low:1,high:8,step:0}", "experiment.space.n_kv_heads.step=0 must be a positive"),
    ("ffn_dim={low:0,high:8192,log:true}", "experiment.space.ffn_dim: log=true needs low > 0"),
    ("n_kv_heads={low:a,high:b}", "low='a' and high='b' must be numbers"),
    ("b={choices:{a:5}}", "experiment.space.b.choices.a: a bundle is a mapping"),
    ("b={choices:{a:{foo:1}}}", "(unknown: foo)"),
    ("b={choices:{a:{batch:0}}}", "experiment.space.b.choices.a.batch: batch=0 must be"),
    ("batch={choices:[0,1]}", "experiment.space.batch.choices: batch=0 must be an integer >= 1"),
    ("new_tokens={low:0,high:4}", "experiment.space.new_tokens: new_tokens=0 must be"),
    ("mode={choices:[fast]}", "mode='fast' is not one of eager, cudagraph, compile"),
    ("routing={choices:[router,topk]}", "routing='topk' must be router or uniform"),
])
def test_a_malformed_space_entry_is_refused_by_name_before_any_work(entry, message):
    cfg = compose_cfg(["quiet=true", "study.predict=true", "hardware=h100_sxm",
                       f"+experiment.space.{entry}"])
    with pytest.raises(ValueError) as e:
        plan_from_config(cfg)
    assert message in str(e.value)


@pytest.mark.parametrize("extra,message", [
    # Optuna's traceback; a figure twice ended in a traceback of the report's plot after the
    # study ran; an MBU objective FAILed every predicted trial; an inverted band PRUNED all
    (["study.objectives=[]", "study.directions=[]"], "study.objectives is empty"),
    (["study.objectives=[decode_tok_s,decode_tok_s]", "study.directions=[maximize,minimize]"],
     "study.objectives names decode_tok_s twice"),
    (["study.objectives=[decode_mbu_vs_measured,ttft_ms]", "study.directions=[maximize,minimize]"],
     "objective(s) ['decode_mbu_vs_measured'] are not predicted"),
    (["+experiment.constraints.params_total={low:5,high:1}"],
     "constraint 'params_total': low=5 is above high=1"),
    (["+experiment.constraints.params_total={low:abc}"], "must bound by numbers"),
])
def test_objectives_and_constraints_no_study_could_use_are_refused_at_the_plan(extra, message):
    cfg = compose_cfg(["quiet=true", "study.predict=true", "hardware=h100_sxm", *extra])
    with pytest.raises(ValueError) as e:
        plan_from_config(cfg)
    assert message in str(e.value)


def test_every_predicted_objective_is_in_a_predict_only_row():
    from sweep.common.row import OBJECTIVES
    from sweep.config.objectives import PREDICTED

    assert set(PREDICTED) <= set(OBJECTIVES) and "decode_mbu_vs_measured" not in PREDICTED


def test_a_cpu_study_of_other_cores_is_another_study(monkeypatch):
    # the CPU's identity was the word "cpu": a study resumed with other cores (another machine,
    # another affinity) mixed rows measured with 2 threads and with 16 under one name
    import sweep.common.env as env

    base = ["+experiment=gqa_vs_mha", "device=cpu", "quiet=true"]
    plain = plan_from_config(compose_cfg(base))
    assert plain.identity["cpu"] == {"processor": env.cpu_model(), "threads": env.cpu_threads()}
    monkeypatch.setattr(env, "cpu_threads", lambda: 999)
    assert plan_from_config(compose_cfg(base)).name != plain.name
    monkeypatch.setattr(env, "cpu_model", lambda: "another CPU")
    assert plan_from_config(compose_cfg(base)).identity["cpu"]["processor"] == "another CPU"
    # a predict-only study's figures do not depend on the CPU it is priced on
    pred = ["quiet=true", "study.predict=true", "hardware=h200"]
    assert "cpu" not in plan_from_config(compose_cfg(pred)).identity


def test_an_injected_fault_is_checked_and_makes_a_study_of_its_own():
    # fault= was left out of the identity (a faulty run's FAILs kept as the real study's
    # results) and read only when a trial reached it (a typo ran silently; '@x' a traceback)
    base = ["+experiment=gqa_vs_mha", "device=cpu", "quiet=true"]
    plain = plan_from_config(compose_cfg(base))
    faulty = plan_from_config(compose_cfg(base + ["fault=measure:crash@1"]))
    assert faulty.name != plain.name and faulty.identity["fault"] == "measure:crash@1"
    for bad in ("measure:typo", "nowhere", "measure:raise@x", "measure:crash,start:"):
        with pytest.raises(ValueError, match=r"fault=.*WHERE:KIND"):
            plan_from_config(compose_cfg(base + [f"fault='{bad}'"]))
    frozen = plan_from_config(compose_cfg(base + ["calibration_policy=frozen"]))
    assert frozen.name != plain.name


def test_a_gpu_spec_never_stands_for_the_cpu_a_study_measures_on():
    # hardware=h100_sxm on a machine without a GPU: the tiny CPU rows had been tied to the H100's
    # datasheet (MFU 0.0007 "of the H100"); the fallback now measures against the CPU's own spec
    # and prices the real designs on the H100; a measured study of the configured model on the
    # CPU against a GPU's datasheet is refused by name
    fallback = plan_from_config(compose_cfg(["device=cpu", "quiet=true", "hardware=h100_sxm"]))
    assert fallback.spec.name == "cpu" and "h100_sxm" in fallback.shadow["targets"]
    assert "-cpu-" in fallback.name and "h100_sxm" not in fallback.name
    with pytest.raises(ValueError, match=r"hardware=h100_sxm does not describe this device"):
        plan_from_config(compose_cfg(["device=cpu", "quiet=true", "cpu.enabled=false",
                                      "hardware=h100_sxm"]))
    own = plan_from_config(compose_cfg(["device=cpu", "quiet=true", "cpu.enabled=false",
                                        "hardware=epyc_9654"]))  # a CPU's spec: the user's word
    assert own.spec.name == "epyc_9654"
    priced = plan_from_config(compose_cfg(["device=cpu", "quiet=true", "study.predict=true",
                                           "hardware=h100_sxm"]))
    assert priced.spec.name == "h100_sxm"


def test_a_predict_only_study_on_a_spec_without_peaks_is_refused_before_any_work():
    # study.predict=true hardware=cpu made a study whose every design FAILed "cannot predict: cpu:
    # peak_tflops.bf16 is not stated" (exit 1); advise suggested exactly that command
    with pytest.raises(ValueError, match=r"hardware=cpu: a predict-only study .*peak_tflops"):
        plan_from_config(compose_cfg(["device=cpu", "quiet=true", "study.predict=true",
                                      "hardware=cpu"]))
    stated = plan_from_config(compose_cfg(["device=cpu", "quiet=true", "study.predict=true",
                                           "hardware=cpu", "hardware.hbm_gb_s=100",
                                           "hardware.peak_tflops.bf16=2"]))
    assert stated.spec.peak_bytes_s == 100e9


def test_two_runs_started_in_one_second_keep_their_own_hydra_folders(tmp_path):
    """Hydra's run folder was named by the second alone: two workers started together wrote
    their ``.hydra/`` records (the overrides each ran with) into one folder, the later over the
    earlier. The folder now carries the process id as well."""
    from hydra import compose, initialize_config_dir

    from sweep.common.env import CONF
    from sweep.config.schema import register

    register()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=[f"results_dir={tmp_path}"],
                      return_hydra_config=True)
    run, multi = cfg.hydra.run.dir, cfg.hydra.sweep.dir
    assert run.startswith(f"{tmp_path}/hydra/") and run.endswith(f"_{os.getpid()}")
    assert multi.endswith(f"_{os.getpid()}")
