"""The report as JSON, Markdown or HTML (a table sortable by any column, an SVG plot of error per module)."""
from __future__ import annotations

import html
import json
import math
import os
import shlex

_COLUMNS = ("op", "module", "location", "phase", "calls", "over_tolerance", "max_abs", "max_rel", "cosine", "ulp")


def _num(value: object) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, float):
        if value == 0:
            return "0"
        return f"{value:.4g}" if 1e-3 <= abs(value) < 1e5 else f"{value:.3e}"
    return str(value)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _tests_lines(data: dict) -> list[str]:
    tests = data.get("tests") or {}
    differ = tests.get("differ", [])
    if not differ:
        return [f"{tests.get('compared', 0)} tests: every outcome the same on both backends."]
    ref, backend = data["reference"], data["backend"]
    return ([f"{len(differ)} of {tests.get('compared', 0)} tests differ in outcome ({ref} -> {backend}):"]
            + [f"  {d['test']}: {d[ref]} -> {d[backend]}" + (f" ({d['message']})" if d.get("message") else "")
               for d in differ])


def _first_lines(data: dict) -> list[str]:
    if data["level"] == "tests":
        return _tests_lines(data)
    first = data.get("first_divergence")
    if first is None:
        what = "op" if data["level"] == "op" else "module"
        if data.get("failed"):  # not a clean bill: the run stopped
            return [f"No {what} compared before the failure went beyond tolerance."]
        return [f"No {what} went beyond tolerance."]
    errs = first.get("errors", {})
    what = first.get("op") or "module output"
    return [f"First divergence: `{what}` in `{first.get('module') or '(no module)'}` at `{first.get('location')}` "
            f"({first.get('phase', 'forward')}, call #{first.get('index')}): max abs {_num(errs.get('max_abs'))}, "
            f"max rel {_num(errs.get('max_rel'))}, cosine {_num(errs.get('cosine'))}, "
            f"{_num(errs.get('ulp'))} ulp (rtol {errs.get('rtol')}, atol {errs.get('atol')})"]


def _whole_lines(data: dict) -> list[str]:
    whole = data.get("whole_run")
    if whole is None:
        return ["Whole run: not compared."]
    first = whole.get("first_difference")
    head = (f"Whole run ({whole['numbers_compared']} printed numbers, {whole['lines'][0]} lines): max drift "
            f"abs {_num(whole['max_abs'])}, rel {_num(whole['max_rel'])}; ")
    if first is None:
        return [head + f"every line within rtol {whole['rtol']}, atol {whole['atol']}."]
    return [head + f"first line beyond tolerance: line {first['line']} ({first['why']})",
            f"    {data['reference']}: {first['reference']}", f"    {data['backend']}: {first['backend']}"]


def _calls(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"


def _failed_lines(data: dict) -> list[str]:
    """First in every report: the runs that failed, so their ops are not taken for a clean comparison."""
    return [f"FAILED: the program failed {f['run']} (exit status {f['exit_status']})"
            + (f": {f['error']}" if f.get("error") else "") + " -- the comparison covers what ran before it."
            for f in data.get("failed") or []]


_CAUSE_ROWS = 10  # rows of each cause printed; the report (--out) lists them all


def _cause_lines(data: dict) -> list[str]:
    """Why the whole runs can differ while no op does: random ops, autocast policies."""
    lines = []
    random_ops = data.get("random_ops") or []
    if random_ops:
        calls = sum(r["calls"] for r in random_ops)
        lines.append(f"Random ops: {_calls(calls)} of {len(random_ops)} random op(s) drew on {data['backend']}; "
                     f"they draw from each backend's own generator, so their results differ between the "
                     f"backends by design and are not compared op by op:")
        lines += [f"    `{r['op']}` in `{r['module']}` at `{r['location']}`: {_calls(r['calls'])}"
                  for r in random_ops[:_CAUSE_ROWS]]
    autocast = data.get("autocast_dtypes") or []
    if autocast:
        ref, backend = data["reference"], data["backend"]
        lines.append(f"Autocast: the backends' autocast policies differ; {len(autocast)} op(s) ran in "
                     f"another dtype on each side:")
        lines += [f"    `{r['aten_op']}` of `{r['op']}` in `{r['module']}` at `{r['location']}`: {r['backend_dtype']} "
                  f"on {backend}, {r['reference_dtype']} on {ref} ({_calls(r['calls'])})" for r in autocast[:_CAUSE_ROWS]]
    if len(random_ops) > _CAUSE_ROWS or len(autocast) > _CAUSE_ROWS:
        lines.append("    (the report written with --out lists them all)")
    return lines


def format_text(data: dict) -> str:
    """The few lines ``torchdevice compare`` prints."""
    lines = [f"torchdevice compare: {data['backend']} against reference {data['reference']}, level {data['level']}"]
    lines += _failed_lines(data)
    summary = data.get("summary", {})
    if data["level"] == "tests":
        return "\n".join(lines + _first_lines(data)) + "\n"
    if data["level"] == "op":
        lines.append(f"{summary.get('ops_compared', 0)} op calls compared, {summary.get('ops_over_tolerance', 0)} "
                     f"over tolerance, {summary.get('reference_failed', 0)} the reference could not run")
    else:
        lines.append(f"{summary.get('modules_compared', 0)} module outputs compared, "
                     f"{summary.get('modules_over_tolerance', 0)} over tolerance")
    return "\n".join(lines + _first_lines(data) + _whole_lines(data) + _cause_lines(data)) + "\n"


def format_markdown(data: dict, max_rows: int = 200) -> str:
    out = ["# torchdevice compare", ""]
    out += [f"**{line}**" for line in _failed_lines(data)] + ([""] if data.get("failed") else [])
    out += [f"- Command: `{shlex.join(data['command'])}`",
           f"- Backend `{data['backend']}` against reference `{data['reference']}`, level `{data['level']}`",
           f"- Tolerance: {data['tolerance']}", f"- Program exit status: {data['program_status']}",
           f"- Summary: {data['summary']}", ""]
    out += [f"**{line}**" if i == 0 else line for i, line in enumerate(_first_lines(data))] + [""]
    if data["level"] != "tests":
        out += _whole_lines(data) + [""]
    out += _cause_tables(data)
    if data["ops"]:
        rows = sorted(data["ops"], key=lambda r: -_sort_value(r.get("max_rel")))[:max_rows]
        out += [f"## Ops (worst relative error first; {len(rows)} of {len(data['ops'])})", "",
                "| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * 4 + "---:|" * 6]
        out += ["| " + " | ".join(f"`{_cell(r.get(c, ''))}`" if c == "op" else _cell(_num(r.get(c, "")))
                                  for c in _COLUMNS) + " |" for r in rows]
        out.append("")
    if data["modules"]:
        cols = _module_columns(data)
        out += ["## Modules (in the order first run)", "", "| " + " | ".join(cols) + " |", "|---|" + "---:|" * 6]
        out += ["| " + " | ".join(_cell(_num(m.get(c, ""))) or "(none)" for c in cols) + " |" for m in data["modules"]]
        out.append("")
    return "\n".join(out) + "\n"


def _table(title: str, rows: list[dict], columns: tuple[str, ...]) -> list[str]:
    if not rows:
        return []
    return ([f"## {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) - 1) + "---:|"]
            + ["| " + " | ".join(_cell(_num(r.get(c, ""))) for c in columns) + " |" for r in rows] + [""])


def _cause_tables(data: dict) -> list[str]:
    return (_table("Random ops (each backend draws from its own generator)", data.get("random_ops") or [],
                   ("op", "module", "location", "device", "calls"))
            + _table("Autocast: ops that ran in another dtype on each side", data.get("autocast_dtypes") or [],
                     ("op", "aten_op", "module", "location", "backend_dtype", "reference_dtype", "calls")))


def _module_columns(data: dict) -> tuple[str, ...]:
    count = "ops" if data["level"] == "op" else "calls"  # ops run in the module; calls of the module
    return ("module", count, "over_tolerance", "max_abs", "max_rel", "cosine", "ulp")


def _sort_value(value: str | float | None) -> float:
    if isinstance(value, str):
        return math.inf if value == "inf" else math.nan if value == "nan" else 0.0
    return float(value or 0.0)


def _svg(modules: list[dict], key: str = "max_rel", width: int = 720, height: int = 240) -> str:
    """Log-scale bars of ``key`` per module, in run order."""
    values = [_sort_value(m.get(key)) for m in modules]
    if not values:
        return "<svg xmlns='http://www.w3.org/2000/svg' width='10' height='10'></svg>"
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    lo = math.floor(math.log10(min(finite))) if finite else -12
    hi = math.ceil(math.log10(max(finite))) if finite else 0
    hi = max(hi, lo + 1)
    left, bottom, top = 60, 20, 10
    plot_h = height - bottom - top
    step = (width - left - 10) / len(values)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
             f"aria-label='{key} per module'>",
             f"<line x1='{left}' y1='{top}' x2='{left}' y2='{top + plot_h}' stroke='black'/>"]
    for exp in range(lo, hi + 1):
        y = top + plot_h - (exp - lo) / (hi - lo) * plot_h
        parts.append(f"<text x='{left - 4}' y='{y + 4:.1f}' font-size='10' text-anchor='end'>1e{exp}</text>")
    for i, (module, value) in enumerate(zip(modules, values)):
        level = (math.log10(value) - lo) / (hi - lo) if value > 0 and math.isfinite(value) else (
            1.0 if value > 0 else 0.0)
        h = max(level * plot_h, 1.0)
        colour = "#c0392b" if module.get("over_tolerance") else "#2e86c1"
        name = html.escape(str(module.get("module") or "(none)"))
        parts.append(f"<rect x='{left + i * step + 1:.1f}' y='{top + plot_h - h:.1f}' width='{max(step - 2, 1):.1f}' "
                     f"height='{h:.1f}' fill='{colour}'><title>{name}: {key} {_num(module.get(key))}</title></rect>")
    parts.append(f"<text x='{left}' y='{height - 4}' font-size='10'>modules in run order ({key}, log scale; red: "
                 f"over tolerance)</text></svg>")
    return "".join(parts)


_SORT_JS = """
function sortTable(th){const table=th.closest('table');const idx=[...th.parentNode.children].indexOf(th);
const body=table.tBodies[0];const rows=[...body.rows];const asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
const val=r=>{const t=r.cells[idx].dataset.v??r.cells[idx].textContent;const n=parseFloat(t);return isNaN(n)?t:n;};
rows.sort((a,b)=>{const x=val(a),y=val(b);return (x<y?-1:x>y?1:0)*(asc?1:-1);});rows.forEach(r=>body.appendChild(r));}
"""


def format_html(data: dict) -> str:
    esc = html.escape
    head = "".join(f"<th onclick='sortTable(this)'>{esc(c)}</th>" for c in _COLUMNS)
    rows = []
    for r in data["ops"]:
        cells = []
        for c in _COLUMNS:
            value = r.get(c, "")
            sort = f" data-v='{_sort_value(value)}'" if c in ("max_abs", "max_rel", "cosine", "ulp") else ""
            cells.append(f"<td{sort}>{esc(_num(value))}</td>")
        cls = " class='over'" if r.get("over_tolerance") else ""
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    mod_cols = _module_columns(data)
    mod_rows = "".join("<tr>" + "".join(f"<td>{esc(_num(m.get(c, '')))}</td>" for c in mod_cols) + "</tr>"
                       for m in data["modules"])
    text = "".join(f"<p>{esc(line)}</p>" for line in _failed_lines(data) + _first_lines(data) + _whole_lines(data)
                   + _cause_lines(data))
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>torchdevice compare</title><style>"
        "body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
        "th{cursor:pointer;background:#eee}tr.over{background:#fdd}</style>"
        f"<script>{_SORT_JS}</script></head><body><h1>torchdevice compare</h1>"
        f"<p><code>{esc(shlex.join(data['command']))}</code></p>"
        f"<p>backend {esc(data['backend'])} against reference {esc(data['reference'])}, level {esc(data['level'])}; "
        f"{esc(json.dumps(data['summary']))}</p>{text}"
        f"<h2>Error per module</h2>{_svg(data['modules'])}"
        f"<h2>Ops</h2><p>Click a column to sort.</p><table id='ops'><thead><tr>{head}</tr></thead><tbody>"
        f"{''.join(rows)}</tbody></table>"
        f"<h2>Modules</h2><table id='modules'><thead><tr>"
        + "".join(f"<th onclick='sortTable(this)'>{esc(c)}</th>" for c in mod_cols)
        + f"</tr></thead><tbody>{mod_rows}</tbody></table></body></html>\n")


def write(path: str, data: dict) -> None:
    """Write ``data`` to ``path``: ``.json``, ``.html``/``.htm``, else Markdown."""
    lower = path.lower()
    if lower.endswith(".json"):
        text = json.dumps(data, indent=2) + "\n"
    elif lower.endswith((".html", ".htm")):
        text = format_html(data)
    else:
        text = format_markdown(data)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
