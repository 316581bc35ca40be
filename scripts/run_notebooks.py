"""Run the notebooks headlessly with papermill, parameterized from one YAML file.

    python scripts/run_notebooks.py                                  # all notebooks, their defaults (→ runs/)
    python scripts/run_notebooks.py --params notebooks/ci_parameters.yaml   # CI's shrunk runs
    python scripts/run_notebooks.py notebooks/02_fp8_arms.ipynb -p steps=50
    python scripts/run_notebooks.py --params notebooks/reproduce_parameters.yaml --commit-outputs
                                                   # `make reproduce`: figures/ and the committed outputs

The parameters file maps a notebook's stem to the values that replace its `parameters` cell:

    02_fp8_arms:
      steps: 4

Papermill alone only warns about a parameter the notebook does not have; here an unknown notebook or
parameter name stops the run before anything executes, naming the bad key and the valid ones.
Executed notebooks (with outputs) go to --out-dir (default runs/notebooks/); the figures go wherever
the notebooks write them (their default: runs/figures/). With --commit-outputs the executed notebook
replaces notebooks/NN_name.ipynb, cleaned so that it stays paired with NN_name.py: papermill's
injected-parameters cell and its metadata are removed, the outputs are kept, and the notebook's metadata
records the command, the parameters, a fingerprint of the outputs and one of the code that made them
(`scrl_min_run`: `outputs_sha256`, `code_sha256`; JupyterLab started by `make lab` drops that record when it
saves other outputs). Only `make reproduce` uses it, together with notebooks/reproduce_parameters.yaml, whose
parameters write figures/.

`code_sha256` hashes the code cells as committed (code_fingerprint: markdown and comments left out, so a prose or
comment edit does not count; the parameters cell in; papermill's injected cell out). tests/test_notebooks.py fails
when a committed notebook's code no longer hashes to it, unless notebooks/stale.yaml lists the notebook and what changed since
its outputs were made (the next rerun of that notebook removes the line).
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

import papermill as pm
import yaml

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"


class ParameterError(SystemExit):
    pass


def notebook_parameters(path: Path) -> dict:
    """Names and defaults of the notebook's `parameters` cell (exactly one such cell is required)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ParameterError(f"{path.name}: expected exactly one cell tagged 'parameters', "
                             f"found {len(cells)}")
    return parameters_from_source(cells[0].source)


def parameters_from_source(source: str) -> dict:
    """{name: value} of a parameters cell's literal assignments (comments ignored)."""
    names = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = ast.literal_eval(node.value)
    return names


def check_parameters(path: Path, given: dict) -> None:
    known = notebook_parameters(path)
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ParameterError(f"{path.name}: unknown parameter(s) {unknown}; this notebook's "
                             f"parameters are {sorted(known)}")


def _joined(v) -> str:
    """A notebook text field as one string (nbformat stores it as a string or a list of lines)."""
    return "".join(v) if isinstance(v, list) else str(v)


def outputs_fingerprint(nb) -> str:
    """sha256 of what a notebook's code cells show (stream text, text/plain, images, errors), ignoring how
    a front end stores it (a string or a list of lines, output metadata, execution counts)."""
    import hashlib

    parts = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            parts.append([o["output_type"], o.get("name", ""), _joined(o.get("text", "")).strip(),
                          _joined(data.get("text/plain", "")).strip(), _joined(data.get("image/png", "")).replace("\n", ""),
                          o.get("ename", "")])
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()


def code_cells(nb) -> list[str]:
    """The sources of a notebook's code cells, as code_fingerprint reads them: papermill's injected-parameters
    cell left out, comments left out (`_without_comments`), each line without trailing whitespace, blank lines
    outside strings left out."""
    return [_without_comments(_joined(c["source"])) for c in nb["cells"] if c["cell_type"] == "code"
            and "injected-parameters" not in c.get("metadata", {}).get("tags", [])]


def _without_comments(source: str) -> str:
    """A cell's code without its comments: each `#` comment (as Python's tokenizer finds it: a `#` inside a string is
    not one) cut from its line, trailing whitespace stripped, and the lines that hold no code (blank, or a comment
    only) dropped; the lines a multi-line string spans up to its closing line are kept exactly as they are. A
    comment cannot change what a cell computes, so editing one does not make a notebook's outputs stale. Not
    Python, so nothing cut as a comment: an IPython shell or magic line (`!…`, `%…`) is kept whole; a cell magic
    (`%%…`) and a cell the tokenizer cannot read keep every line but blank ones, stripped of trailing whitespace."""
    import io
    import tokenize

    lines = source.split("\n")  # as the tokenizer's readline splits them
    as_text = "\n".join(line.rstrip() for line in lines if line.strip())  # not Python: every non-blank line
    if source.lstrip().startswith("%%"):
        return as_text
    keep, exact, cut = set(), set(), {}  # rows (1-based) holding code; rows inside a string; where a comment starts
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                cut[tok.start[0]] = tok.start[1]
            elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                  tokenize.ENDMARKER):
                keep.update(range(tok.start[0], tok.end[0] + 1))
                exact.update(range(tok.start[0], tok.end[0]))  # a string's rows before its last: its own text
    except (tokenize.TokenError, SyntaxError):
        return as_text
    out = []
    for i in sorted(keep):
        line = lines[i - 1]
        if i not in exact and not line.lstrip().startswith(("!", "%")):
            line = line[:cut.get(i)].rstrip()
        out.append(line)
    return "\n".join(out)


def code_fingerprint(nb) -> str:
    """sha256 of the code that makes a notebook's outputs: its code cells in order (code_cells), the parameters
    cell included, markdown excluded, as one JSON list. Recorded as `code_sha256` when outputs are committed."""
    import hashlib

    return hashlib.sha256(json.dumps(code_cells(nb), ensure_ascii=False).encode()).hexdigest()


def drop_stale_provenance(model, **_) -> None:
    """JupyterLab's pre-save hook (`make lab`: scripts/jupyter_lab_config.py). A notebook whose outputs are no
    longer those its `scrl_min_run` record fingerprints (it was run or edited in JupyterLab) is saved
    without that record, so it no longer claims `make reproduce` made it."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    meta = model["content"].get("metadata", {})
    run = meta.get("scrl_min_run")
    if run is not None and run.get("outputs_sha256") != outputs_fingerprint(model["content"]):
        del meta["scrl_min_run"]


def collapse_progress(nb) -> None:
    """Store each cell's streams as a notebook front end shows them: consecutive outputs of one stream
    joined, and of a line that carriage returns rewrite (a tqdm bar) only its last state kept. A bar over
    40 runs otherwise stores 40 outputs that display as one line."""
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        merged = []
        for o in cell.get("outputs", []):
            if (o["output_type"] == "stream" and merged and merged[-1]["output_type"] == "stream"
                    and merged[-1]["name"] == o["name"]):
                merged[-1]["text"] = _joined(merged[-1]["text"]) + _joined(o["text"])
            else:
                merged.append(o)
        for o in merged:
            if o["output_type"] == "stream":
                o["text"] = "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in _joined(o["text"]).split("\n"))
        cell["outputs"] = merged


def clean_executed(src: Path, dst: Path, params: dict, command: str = "make reproduce") -> None:
    """Copy an executed notebook to dst without papermill's injected cell and metadata, keeping the
    outputs; the run's parameters and the fingerprints of its code and outputs are recorded in the notebook
    metadata ("scrl_min_run")."""
    import nbformat

    nb = nbformat.read(src, as_version=4)
    nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    for c in nb.cells:
        c.metadata.pop("papermill", None)
        c.metadata.pop("execution", None)
        if not c.metadata.get("tags", True):  # papermill adds an empty tag list to every cell
            del c.metadata["tags"]
    collapse_progress(nb)
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)  # state of a widget no cell output shows
    nb.metadata.kernelspec["display_name"] = "Python 3 (ipykernel)"  # as JupyterLab names python3
    nb.metadata["scrl_min_run"] = {"parameters": json.loads(json.dumps(params)), "command": command,
                                   "code_sha256": code_fingerprint(nb), "outputs_sha256": outputs_fingerprint(nb)}
    nbformat.write(nb, dst)


def parse_cli_params(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise ParameterError(f"-p expects name=value, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k] = v
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/NN_*.ipynb in order")
    ap.add_argument("--params", type=Path, help="YAML file: {notebook_stem: {name: value}}")
    ap.add_argument("-p", dest="cli", action="append", default=[], metavar="NAME=VALUE",
                    help="override one parameter of every notebook given (repeatable)")
    ap.add_argument("--out-dir", type=Path, default=REPO / "runs" / "notebooks",
                    help="where executed copies (with outputs) are written")
    ap.add_argument("--commit-outputs", action="store_true",
                    help="also replace each notebooks/NN_name.ipynb by its executed, cleaned copy "
                         "(make reproduce)")
    ap.add_argument("--command", default="make reproduce",
                    help="the command recorded in a committed notebook's metadata (with --commit-outputs)")
    args = ap.parse_args(argv)

    paths = [p.resolve() for p in args.notebooks] or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    table = yaml.safe_load(args.params.read_text()) if args.params else {}
    table = table or {}
    stems = {p.stem for p in paths}
    all_stems = {p.stem for p in NOTEBOOKS.glob("*.ipynb")}
    stray = sorted(set(table) - all_stems)
    if stray:
        raise ParameterError(f"{args.params}: unknown notebook(s) {stray}; notebooks are "
                             f"{sorted(all_stems)}")
    cli = parse_cli_params(args.cli)
    plan = []
    for path in paths:  # check everything before running anything
        params = dict(table.get(path.stem, {})) | cli
        check_parameters(path, params)
        plan.append((path, params))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    for i, (path, params) in enumerate(plan, 1):
        t0 = time.time()
        print(f"[run_notebooks] ({i}/{len(plan)}, {(t0 - start) / 60:.0f} min so far) {path.name} {params or ''}",
              flush=True)
        pm.execute_notebook(str(path), str(args.out_dir / path.name), parameters=params,
                            kernel_name="python3", cwd=str(path.parent), progress_bar=False,
                            stdout_file=sys.stdout, stderr_file=sys.stderr)
        print(f"[run_notebooks] {path.name} done in {time.time() - t0:.0f}s", flush=True)
        if args.commit_outputs:
            clean_executed(args.out_dir / path.name, path, params, args.command)
            print(f"[run_notebooks] {path.name}: outputs written to {path.relative_to(REPO)}", flush=True)
    print(f"[run_notebooks] {len(plan)} notebook(s) ran in {(time.time() - start) / 60:.1f} min: "
          f"{', '.join(sorted(stems))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
