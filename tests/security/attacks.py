"""The attack corpus of the TVMScript reader: TVMScript that would run code in TVM's
parser, one or more per rule of the reader (tvm_bridge/tvmscript_guard.py).

Each attack is a whole module; `{marker}` stands for a file path the attack
tries to create, so a test can check that nothing ran. `at` is the text whose
first occurrence is where the refusal must be located (line, 1-based column),
`says` a part of the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Attack:
    name: str
    text: str
    at: str
    says: str

    def module(self, marker: Path) -> str:
        return self.text.replace("{marker}", str(marker))

    def location(self, marker: Path) -> tuple[int, int]:
        """(line, 1-based column) of the first `at` in the module."""
        text = self.module(marker)
        index = text.index(self.at.replace("{marker}", str(marker)))
        line = text.count("\n", 0, index) + 1
        column = index - (text.rfind("\n", 0, index) + 1) + 1
        return line, column


def _relax(body: str, params: str = 'x: R.Tensor((4,), dtype="float32")', ret: str = 'R.Tensor((4,), dtype="float32")',
           deco: str = "@R.function", head: str = "", class_extra: str = "") -> str:
    return (
        f"{head}@I.ir_module\nclass Module:\n{class_extra}"
        f"    {deco}\n    def main({params}) -> {ret}:\n{body}"
    )


_DATAFLOW = "        with R.dataflow():\n            y = R.add(x, x)\n            R.output(y)\n        return y\n"
_SYSTEM = '__import__("os").system("touch {marker}")'
_PRIM = (
    "@I.ir_module\nclass Module:\n    @T.prim_func\n"
    '    def add_one(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):\n'
    "        for i in range(4):\n{body}"
)

ATTACKS: tuple[Attack, ...] = (
    # The example: a type annotation.
    Attack(
        "issue-annotation",
        _relax(_DATAFLOW, params=f'x: R.Tensor(({_SYSTEM} + 4,), dtype="float32")'),
        "__import__",
        "`__import__`",
    ),
    Attack("builtin-exec", _relax('        y = exec("open(\'{marker}\', \'w\')")\n        return y\n'), "exec", "builtin"),
    Attack("builtin-open", _relax('        y = open("{marker}", "w")\n        return y\n'), "open", "builtin"),
    Attack(
        "builtins-subscript",
        _relax('        y = __builtins__["exec"]("open(\'{marker}\', \'w\')")\n        return y\n'),
        "__builtins__",
        "`__builtins__`",
    ),
    Attack(
        "dunder-chain",
        _relax("        y = ().__class__.__base__.__subclasses__()\n        return y\n"),
        "().__class__",
        "`.__class__`",
    ),
    Attack(
        "dunder-on-allowed-chain",
        _relax("        y = R.add.__globals__\n        return y\n"),
        "R.add.__globals__",
        "starting with `_`",
    ),
    Attack(
        "external-kernel-os",
        _PRIM.format(body='            T.evaluate(T.external_kernel.os.system("touch {marker}"))\n'),
        "T.external_kernel.os.system",
        "`T.external_kernel`",
    ),
    Attack(
        "relax-ir-builtins",
        _relax('        y = R.ir.builtins.exec("open(\'{marker}\', \'w\')")\n        return y\n'),
        "R.ir.builtins.exec",
        "`R.ir`",
    ),
    Attack(
        "tvm-in-annotation",
        _relax(_DATAFLOW, params='x: R.Tensor((4,), dtype=tvm.script.from_source("x") or "float32")'),
        "tvm.script.from_source",
        "`I.`, `R.` and `T.`",
    ),
    Attack(
        "decorator-keyword",
        _relax(_DATAFLOW, deco=f"@R.function(private={_SYSTEM} != 0)"),
        "__import__",
        "literal",
    ),
    Attack("decorator-other", _relax(_DATAFLOW, deco=f"@{_SYSTEM}"), "__import__", "decorator"),
    Attack("decorator-pyfunc", _relax(_DATAFLOW, deco="@I.pyfunc"), "I.pyfunc", "`@I.pyfunc`"),
    Attack(
        "decorator-stacked",
        _relax(_DATAFLOW, deco="@R.function\n    @R.function"),
        "def main",
        "exactly one decorator",
    ),
    Attack(
        "default-argument",
        _relax(_DATAFLOW, params=f'x: R.Tensor((4,), dtype="float32") = {_SYSTEM}'),
        "__import__",
        "default",
    ),
    Attack(
        "return-annotation",
        _relax(_DATAFLOW, ret=f'R.Tensor(({_SYSTEM} + 4,), dtype="float32")'),
        "__import__",
        "`__import__`",
    ),
    Attack("class-body-call", _relax(_DATAFLOW, class_extra=f"    {_SYSTEM}\n"), "__import__", "class body"),
    Attack(
        "class-body-assign",
        _relax(_DATAFLOW, class_extra=f"    helper = {_SYSTEM}\n"),
        "helper =",
        "class body",
    ),
    Attack(
        "class-body-module-attrs",
        _relax(_DATAFLOW, class_extra=f'    I.module_attrs({{"x": {_SYSTEM}}})\n'),
        "__import__",
        "`__import__`",
    ),
    Attack(
        "class-base",
        _relax(_DATAFLOW).replace("class Module:", "class Module(BasePyModule):"),
        "class Module",
        "base classes",
    ),
    Attack(
        "second-metadata",
        'metadata = tvm.ir.load_json("""{"root_index": 0, "nodes": [{"type": "None"}]}""")\n'
        f"metadata = tvm.ir.load_json({_SYSTEM})\n" + _relax(_DATAFLOW),
        "metadata = tvm.ir.load_json(__import__",
        "second `metadata",
    ),
    Attack(
        "metadata-not-a-literal",
        f"metadata = tvm.ir.load_json({_SYSTEM})\n" + _relax(_DATAFLOW),
        "tvm.ir.load_json(__import__",
        "string literal",
    ),
    Attack("metadata-after-class", _relax(_DATAFLOW) + f"metadata = {_SYSTEM}\n", "metadata =", "before the class"),
    Attack("top-level-call", f"{_SYSTEM}\n" + _relax(_DATAFLOW), "__import__", "top of TVMScript"),
    Attack("import-os", "import os\n" + _relax(_DATAFLOW), "import os", "import"),
    Attack("from-os-import", "from os import system\n" + _relax(_DATAFLOW), "from os", "import"),
    Attack(
        "prim-func-body-call",
        _PRIM.format(body=f"            T.evaluate({_SYSTEM})\n"),
        "__import__",
        "`__import__`",
    ),
    Attack(
        "prim-func-body-binding",
        _PRIM.format(body='            v = exec("open(\'{marker}\', \'w\')")\n            b[i] = a[i]\n'),
        "exec",
        "builtin",
    ),
    Attack(
        "prim-func-loop-range",
        _PRIM.format(body="            b[i] = a[i]\n").replace("range(4)", f"range({_SYSTEM})"),
        "__import__",
        "`__import__`",
    ),
    Attack(
        "prim-func-string-parse",
        _relax('        f = T.prim_func("import os")\n        return x\n'),
        "T.prim_func",
        "`T.prim_func`",
    ),
    Attack(
        "lambda",
        _relax(f"        f = (lambda: {_SYSTEM})()\n        return x\n"),
        "lambda",
        "lambda",
    ),
    Attack(
        "comprehension",
        _relax(f"        y = [{_SYSTEM} for v in range(1)]\n        return x\n"),
        "[__import__",
        "comprehension",
    ),
    Attack(
        "f-string",
        _relax("        y = R.const(f\"{{__import__('os').system('touch {marker}')}}\")\n        return x\n"),
        'f"',
        "f-string",
    ),
    Attack("starred", _relax("        y = R.add(*[x, x])\n        return y\n"), "*[x, x]", "starred"),
    Attack(
        "double-star",
        _relax('        y = R.add(x, **{"rhs": x})\n        return y\n'),
        '**{"rhs"',
        "`**`",
    ),
    Attack("walrus", _relax(f"        y = R.add(x, (z := {_SYSTEM}))\n        return y\n"), "z :=", "`:=`"),
    Attack("global", _relax("        global x\n        return x\n"), "global x", "`global`"),
    Attack("namespace-value", _relax("        y = T.ir\n        return x\n"), "T.ir", "`T.ir`"),
    Attack("namespace-argument", _relax("        y = R.add(R.nn, x)\n        return y\n"), "R.nn", "namespace"),
    Attack("bare-namespace", _relax("        y = R\n        return x\n"), "R\n", "namespace"),
    Attack("private-chain", _relax("        y = R._ffi_api\n        return x\n"), "R._ffi_api", "starting with `_`"),
    Attack(
        "call-py-func",
        _relax('        y = R.call_py_func("f", (x,), out_ty=R.Tensor((4,), "float32"))\n        return y\n'),
        "R.call_py_func",
        "`R.call_py_func`",
    ),
    Attack("rebind-cls", _relax(f"        cls = {_SYSTEM}\n        return x\n"), "__import__", "`__import__`"),
    Attack("rebind-namespace", _relax("        R = x\n        return x\n"), "R = x", "cannot be bound"),
    Attack(
        "builtin-bound-in-inner-block",
        _relax(
            "        with R.dataflow():\n            exec = R.add(x, x)\n            R.output(exec)\n"
            "        y = exec(\"open('{marker}', 'w')\")\n        return y\n"
        ),
        "exec(",
        "builtin",
    ),
    Attack(
        "builtin-bound-later",
        _relax("        y = open(\"{marker}\", \"w\")\n        open = R.add(x, x)\n        return y\n"),
        "open(",
        "builtin",
    ),
    Attack(
        "builtin-loop-variable-after-its-loop",
        _PRIM.replace("for i in range(4)", "for open in range(4)").format(
            body='            b[open] = a[open]\n        T.evaluate(open("{marker}", "w"))\n'
        ),
        'open("',
        "builtin",
    ),
    Attack(
        "builtin-named-local-function",
        _relax(
            '        @R.function\n        def open(a: R.Tensor((4,), dtype="float32")) -> R.Tensor((4,), dtype="float32"):\n'
            "            return a\n"
            '        y = open("{marker}", "w")\n        return x\n'
        ),
        "def open",
        "builtin",
    ),
    Attack(
        "decorator-unprinted-keyword",
        _relax(_DATAFLOW, deco="@R.function(check_well_formed=False)"),
        "check_well_formed",
        "no keyword",
    ),
    Attack(
        "sequence-repetition",
        _relax("        y = R.const([0.5] * 1000000000, \"float32\")\n        return x\n"),
        "[0.5] * 1000000000",
        "repeating",
    ),
    Attack("huge-power", _relax("        y = R.const(10 ** 10 ** 9)\n        return x\n"), "10 ** 10 ** 9", "`**`"),
    Attack(
        "attribute-of-call",
        _relax("        y = R.add(x, x).__class__\n        return y\n"),
        "R.add(x, x).__class__",
        "starting with `_`",
    ),
    Attack(
        "attribute-of-local",
        _relax("        y = x.__class__\n        return y\n"),
        "x.__class__",
        "starting with `_`",
    ),
    Attack(
        "cls-other-attribute",
        _relax("        cls = Module\n        y = cls.__dict__\n        return x\n"),
        "cls.__dict__",
        "starting with `_`",
    ),
    # Python's parser normalises identifiers (NFKC): full-width letters name the builtins.
    Attack(
        "nfkc-builtin",
        _relax('        y = \uff45\uff58\uff45\uff43("open(\'{marker}\', \'w\')")\n        return y\n'),
        "\uff45\uff58\uff45\uff43",
        "`exec`",
    ),
    Attack(
        "nfkc-dunder",
        _relax('        y = __\uff49\uff4d\uff50\uff4f\uff52\uff54__("os").system("touch {marker}")\n        return x\n'),
        "__\uff49",
        "`__import__`",
    ),
    Attack(
        "nfkc-namespace-attribute",
        _relax('        y = R.\uff49\uff52.builtins.exec("open(\'{marker}\', \'w\')")\n        return y\n'),
        "R.\uff49\uff52",
        "`R.ir`",
    ),
    # TVM's parser computes Python values: each level of a power of a power multiplies the
    # digits by 64 (five took it 9 s, six need 8 GiB); Relax binds strings and lists to
    # names as they are, and TIR turns a list into IR element by element.
    Attack(
        "power-of-a-power",
        _relax("        y = R.const(((((2 ** 64) ** 64) ** 64) ** 64) ** 64)\n        return x\n"),
        "(((2 ** 64) ** 64) ** 64) ** 64)",
        "number literal on the left",
    ),
    Attack(
        "string-doubling",
        _relax('        s0 = "xxxxxxxx"\n' + "".join(f"        s{i + 1} = s{i} + s{i}\n" for i in range(40))
               + "        return x\n"),
        '"xxxxxxxx"',
        "assigned value",
    ),
    Attack(
        "list-doubling",
        _relax("        l0 = [1]\n" + "".join(f"        l{i + 1} = l{i} + l{i}\n" for i in range(40))
               + "        return x\n"),
        "[1]",
        "assigned value",
    ),
    Attack(
        "string-from-a-slice",
        _relax('        s = "xx"[0:]\n        t = s * 10 ** 9\n        return x\n'),
        '"xx"',
        "assigned value",
    ),
    Attack(
        "string-from-a-tuple",
        _relax('        s = ("x",)[0]\n        t = s * 10 ** 9\n        return x\n'),
        '"x",',
        "assigned value",
    ),
    Attack(
        "prim-func-list-repetition",
        _PRIM.format(body="            l = [1]\n            m = l * 10 ** 9\n            b[i] = a[i]\n"),
        "[1]",
        "assigned value",
    ),
    Attack(
        "try-statement",
        _relax(f"        try:\n            y = {_SYSTEM}\n        except Exception:\n            pass\n        return x\n"),
        "try:",
        "`try`",
    ),
)
