"""Runs one conformance program under one framework: `run_program.py mindspore|mixprec PROGRAM`.

Under `mixprec`, the name `mindspore` (and every `mindspore.x.y`) is made to import `mixprec`
(`mixprec.x.y`): the program is the same text in both runs, which is how docs/python.md says a
MindSpore user runs a program on mixprec ("only the import changed"). The program prints one line
`FACTS {json}` (facts.py); anything else it prints goes to the report only.
"""
import os
import runpy
import sys


def _alias_mixprec_as_mindspore():
    """`import mindspore.train.loss_scale_manager` gives `mixprec.train.loss_scale_manager`: every
    module of mixprec (its submodules register themselves in sys.modules) under the name
    `mindspore...`. A MindSpore module that mixprec lacks stays missing (ModuleNotFoundError)."""
    import mixprec  # noqa: F401
    for name, module in list(sys.modules.items()):
        if name == "mixprec" or name.startswith("mixprec."):
            sys.modules["mindspore" + name[len("mixprec"):]] = module


def main():
    framework, program = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)  # facts.py
    if framework == "mixprec":
        _alias_mixprec_as_mindspore()
    elif framework != "mindspore":
        raise SystemExit(f"run_program.py: unknown framework {framework!r}")
    os.environ["CONFORMANCE_FRAMEWORK"] = framework  # for messages only; programs never branch on it
    sys.argv = [program]
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()
