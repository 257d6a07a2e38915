"""Prompt sets: built-in ones cut from the held-out stdlib modules, or JSONL files.

- `builtin:stdlib-code`: 64 function prefixes (the `def` header and its docstring, or its first
  body line when it has none) for the model to complete: ordinary code completion.
- `builtin:code-edit`: 64 prompts that hold a whole short function, an instruction comment ("the
  same function, renamed to …", "… with parameter `x` renamed to `y`", "… without its
  docstring") and the edited `def` header, so the continuation mostly copies the body already in
  the prompt. This is the agentic editing workload where copy-based drafters (n-gram, suffix)
  shine.
- `builtin:docstring`: 64 function headers followed by the first words of their docstring, for
  the model to go on in prose: the nearest a model trained on the standard library comes to a
  chat-like workload (free text, little to copy).
- `builtin:sql`: 64 text-to-SQL prompts over invented schemas (`sql.py`): a domain the zoo never
  trained on, generated from seeded templates rather than cut from the standard library.

Prompts end where the next token starts a line: the tokenizer merges a newline with the
indentation after it, so a prompt ending in a bare newline would ask for a continuation the
models never saw in training (the token-boundary problem).

Functions come only from `data.HELD_OUT_MODULES`, never from training text, and are picked in the
order of a hash of (set, module, line), so the sets are the same on every machine with the same
standard library. Decorated functions are left out (their headers are not one `def`).

`edit_documents` writes the same kind of example, prompt and edited function, for the functions
of the *training* modules: the zoo targets see them in training, as code models are trained on
edits, so that they learn to carry out the edit by copying (the held-out prompts stay unseen).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specscope.errors import InputError
from specscope.models.zoo.data import read_module, split_modules
from specscope.models.zoo.sql import sql_prompts
from specscope.names import PROMPT_SET_SIZES

MAX_PREFIX_CHARS = 1200
"""Longest `stdlib-code` prompt (≈ 400 tokens), leaving room to complete in 512."""
MAX_EDIT_FUNCTION_CHARS = 600
"""Longest function copied by a `code-edit` prompt: prompt plus copy fit in 512 tokens."""
DOC_LEAD_WORDS = 3
"""Words of its docstring a `docstring` prompt keeps."""
DOC_MIN_WORDS = 16
"""Fewest words of a `docstring` prompt's docstring: the model has prose left to write."""
EDIT_KINDS = ("rename", "param", "nodoc")
"""Edits of a code-edit example, cycled by the example's index."""
RENAME_SUFFIXES = ("_v2", "_new", "_impl", "_copy")


@dataclass(frozen=True)
class Function:
    """A function of a held-out module, dedented to column 0.

    lines: its source lines, `def` first; body_start: index of the first body line;
    doc_end: index of the first line after the docstring (== body_start without one).
    """

    module: str
    line: int
    name: str
    params: tuple[str, ...]
    lines: tuple[str, ...]
    body_start: int
    doc_end: int
    statements: int

    @property
    def text(self) -> str:
        """The whole function, newline-terminated."""
        return "\n".join(self.lines) + "\n"

    def key(self, prompt_set: str) -> str:
        """The hash that orders functions when `prompt_set` picks them."""
        return hashlib.sha256(f"{prompt_set}:{self.module}:{self.line}".encode()).hexdigest()


def held_out_functions(root: Path | None = None) -> list[Function]:
    """Every undecorated function and method of the held-out modules, in module and line order."""
    return module_functions(split_modules(root)[1], root)


def module_functions(modules: list[str], root: Path | None = None) -> list[Function]:
    """Every undecorated function and method of `modules`, in module and line order."""
    functions = []
    for module in modules:
        source = read_module(module, root)
        source_lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.decorator_list:
                functions.append(_function(module, node, source_lines))
    return sorted(functions, key=lambda f: (f.module, f.line))


def _function(
    module: str, node: ast.FunctionDef | ast.AsyncFunctionDef, source_lines: list[str]
) -> Function:
    """A `Function` from its AST node; lines indented less than the `def` are left as they are."""
    indent = node.col_offset
    lines = tuple(
        line[indent:] if not line[:indent].strip() else line
        for line in source_lines[node.lineno - 1 : node.end_lineno]
    )
    body = node.body
    has_doc = (
        isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    )
    params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
    return Function(
        module=module,
        line=node.lineno,
        name=node.name,
        params=tuple(params),
        lines=lines,
        body_start=body[0].lineno - node.lineno,
        doc_end=body[0].end_lineno - node.lineno + 1 if has_doc else body[0].lineno - node.lineno,
        statements=len(body) - has_doc,
    )


def _pick(prompt_set: str, candidates: list[Function]) -> list[Function]:
    """The set's advertised number of candidates, in hash order."""
    size = PROMPT_SET_SIZES[prompt_set]
    chosen = sorted(candidates, key=lambda f: f.key(prompt_set))[:size]
    if len(chosen) < size:
        raise InputError(f"builtin:{prompt_set}: only {len(chosen)} of {size} functions found")
    return chosen


def stdlib_code_prompts(root: Path | None = None) -> list[str]:
    """`builtin:stdlib-code`: function headers with their docstring (or first body line)."""
    prompts = {}
    for f in held_out_functions(root):
        cut = f.doc_end if f.doc_end > f.body_start else f.body_start + 1
        prompt = "\n".join(f.lines[:cut]).rstrip("\n")
        if f.statements >= 2 and len(f.lines) - cut >= 3 and len(prompt) <= MAX_PREFIX_CHARS:
            prompts[f] = prompt
    return [prompts[f] for f in _pick("stdlib-code", list(prompts))]


def docstring_prompts(root: Path | None = None) -> list[str]:
    """`builtin:docstring`: a function's header and the first `DOC_LEAD_WORDS` words of its
    docstring (ending after a word: the tokenizer joins a space to the word after it)."""
    prompts = {}
    for f in held_out_functions(root):
        if f.doc_end == f.body_start:
            continue
        doc = "\n".join(f.lines[f.body_start : f.doc_end])
        opening = re.match(r"\s*[rRuU]?(\"\"\"|\'\'\'|\"|\')", doc)
        if opening is None:
            continue
        words = list(re.finditer(r"\S+", doc[opening.end() :]))
        if len(words) < DOC_MIN_WORDS:
            continue
        head = "\n".join(f.lines[: f.body_start])
        prompt = head + "\n" + doc[: opening.end() + words[DOC_LEAD_WORDS - 1].end()]
        if len(prompt) <= MAX_PREFIX_CHARS:
            prompts[f] = prompt
    return [prompts[f] for f in _pick("docstring", list(prompts))]


def _editable(f: Function) -> bool:
    """Whether `f` makes a code-edit example (two statements or more, short enough to copy)."""
    return f.statements >= 2 and len(f.lines) >= 4 and len(f.text) <= MAX_EDIT_FUNCTION_CHARS


def code_edit_prompts(root: Path | None = None) -> list[str]:
    """`builtin:code-edit`: a function, an edit instruction and the edited header to continue."""
    candidates = [f for f in held_out_functions(root) if _editable(f)]
    return [edit_example(f, i)[0] for i, f in enumerate(_pick("code-edit", candidates))]


def edit_documents(modules: list[str], root: Path | None = None) -> list[str]:
    """Whole code-edit examples (prompt and edited function) for the functions of `modules`
    short enough that the example fits the models' 512-token window."""
    functions = [f for f in module_functions(modules, root) if _editable(f)]
    return ["".join(edit_example(f, i)) for i, f in enumerate(functions)]


def edit_example(f: Function, index: int) -> tuple[str, str]:
    """Example `index` for `f`: (prompt, the edited function after its first line), the kind
    of edit cycling through `EDIT_KINDS` (a kind `f` cannot take falls back to a rename)."""
    header = list(f.lines[: f.body_start])
    body = list(f.lines[f.body_start :])
    body_text = "\n".join(body)
    renamable = [p for p in f.params if p not in ("self", "cls") and _word(p).search(body_text)]
    kind = EDIT_KINDS[index % len(EDIT_KINDS)]
    if kind == "param" and renamable:
        old, new = renamable[0], f"{renamable[0]}_value"
        instruction = f"# The same function with parameter `{old}` renamed to `{new}`:"
        header = [_word(old).sub(new, line) for line in header]
        body = [_word(old).sub(new, line) for line in body]
    elif kind == "nodoc" and f.doc_end > f.body_start:
        instruction = "# The same function without its docstring:"
        body = body[f.doc_end - f.body_start :]
    else:
        new = f.name.strip("_") + RENAME_SUFFIXES[index % len(RENAME_SUFFIXES)]
        instruction = f"# The same function, renamed to {new}:"
        header[0] = header[0].replace(f"def {f.name}(", f"def {new}(", 1)
    head = f.text + "\n\n" + instruction + "\n" + "\n".join(header)
    whole = head + "\n" + "\n".join(body) + "\n"
    prompt = head.rstrip("\n")  # ends at a token boundary (see the module docstring)
    return prompt, whole[len(prompt):]


def _word(name: str) -> re.Pattern[str]:
    """Matches `name` as a whole identifier, not as an attribute (`.name`)."""
    return re.compile(rf"(?<![\w.]){re.escape(name)}(?!\w)")


@cache
def _builtin(name: str) -> tuple[str, ...]:
    """Built-in prompt set `name`, built once per process."""
    build = {"stdlib-code": stdlib_code_prompts, "code-edit": code_edit_prompts,
             "docstring": docstring_prompts,
             "sql": lambda: sql_prompts(PROMPT_SET_SIZES["sql"])}[name]
    return tuple(build())


def load_prompts(spec: str) -> list[str]:
    """The prompts named by `spec`: `builtin:NAME`, or a `.jsonl` file of {"prompt": ...} lines.

    Blank lines of a file are skipped; a missing file, a line that is not a JSON object with a
    string "prompt", or a file without prompts raises `InputError` naming the file and line.
    """
    if spec.startswith("builtin:"):
        name = spec.removeprefix("builtin:")
        if name not in PROMPT_SET_SIZES:
            known = ", ".join(f"builtin:{n}" for n in PROMPT_SET_SIZES)
            raise InputError(f"unknown prompt set {spec!r}; built-in sets: {known}")
        return list(_builtin(name))
    path = Path(spec)
    if path.suffix != ".jsonl":
        raise InputError(f"{spec}: prompts must be builtin:NAME or a .jsonl file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such prompt file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read prompts ({exc})") from None
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}, line {number}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise InputError(f'{path}, line {number}: expected an object with a string "prompt"')
        prompts.append(row["prompt"])
    if not prompts:
        raise InputError(f"{path}: no prompts found")
    return prompts
