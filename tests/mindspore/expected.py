"""The differences between MindSpore 2.10 (CPU) and mixprec that the conformance suite expects,
each with its reason. docs/amp.md's "Where mixprec differs" lists the same ids; run_suite.py fails
on a difference that is not here and on an entry here that matches no difference.

An entry: id (named in docs/amp.md), program (a glob over program file names), keys (globs over
fact keys), optionally the `mindspore` and `mixprec` values it expects (ANY when absent), and the
reason (what a user sees, why mixprec differs, and the fix where one is planned).
"""
ANY = object()
ABSENT = "<absent>"

DIFFERENCES = [
]
