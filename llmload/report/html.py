"""HTML building blocks shared by the report and the comparison: escaping, cells, tables, figures, page.

Everything is inlined (CSS, a few lines of JS, SVG plots) so a page opens offline from a file with no
network: no CDN, no external file, no font download. Missing values render as empty cells, never as
"nan" or "None", because METRICS.md says unrun or unmeasurable cells stay blank.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

__all__ = [
    "as_number",
    "cell_text",
    "esc",
    "figure",
    "fold",
    "is_blank",
    "kv_table",
    "page",
    "section",
    "table",
]


def esc(value: object) -> str:
    """HTML-escape any value as text."""
    return html.escape(str(value), quote=True)


def is_blank(value: Any) -> bool:
    """True for None, NaN, NaT, pd.NA and empty strings or containers: what a blank cell shows."""
    if value is None:
        return True
    if isinstance(value, str):
        return value.strip() == ""
    if isinstance(value, (list, tuple, set, dict)):
        return len(value) == 0
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def as_number(value: object) -> float | None:
    """A cell's number: None for a blank cell (`is_blank`) or a value that is not a number."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)) or is_blank(value):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return None if math.isnan(number) else number


def cell_text(value: object, *, digits: int = 3) -> str:
    """A value as display text: blank when missing, numbers to `digits` significant digits."""
    if is_blank(value):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isinf(value):
            return "∞" if value > 0 else "-∞"
        if value != 0 and (abs(value) >= 10 ** 6 or abs(value) < 10 ** -3):
            return f"{value:.{digits}g}"
        return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:.0f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {cell_text(v, digits=digits)}" for k, v in value.items())
    if isinstance(value, (list, tuple, set)):
        return ", ".join(cell_text(v, digits=digits) for v in value)
    if hasattr(value, "item") and not isinstance(value, str):  # numpy scalars
        try:
            return cell_text(value.item(), digits=digits)
        except (TypeError, ValueError):
            pass
    if hasattr(value, "tolist"):  # numpy arrays (list columns)
        return cell_text(value.tolist(), digits=digits)
    return str(value)


def table(frame: pd.DataFrame | Sequence[dict], *, columns: Sequence[str] | None = None,
          headers: dict[str, str] | None = None, table_id: str | None = None, css_class: str = "data",
          row_class: Iterable[str] | None = None) -> str:
    """An HTML table from a DataFrame (or list of dicts); `headers` renames columns for display."""
    df = frame if isinstance(frame, pd.DataFrame) else pd.DataFrame(list(frame))
    cols = [c for c in (columns or list(df.columns)) if c in df.columns]
    headers = headers or {}
    classes = list(row_class) if row_class is not None else [""] * len(df)
    head = "".join(f"<th>{esc(headers.get(c, c))}</th>" for c in cols)
    rows = []
    for (_, row), cls in zip(df.iterrows(), classes, strict=True):
        cells = "".join(f'<td class="{_cell_class(row[c])}">{esc(cell_text(row[c]))}</td>' for c in cols)
        rows.append(f'<tr class="{esc(cls)}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return (f'<div class="scroll"><table class="{esc(css_class)}"{ident}><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _cell_class(value: object) -> str:
    text = cell_text(value)
    if text in ("pass", "fail", "inconclusive", "invalid", "insufficient"):
        return f"v-{text}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "num"
    return ""


def kv_table(items: Iterable[tuple[str, Any]], *, table_id: str | None = None) -> str:
    """A two-column key/value table."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(cell_text(v))}</td></tr>" for k, v in items)
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return f'<div class="scroll"><table class="kv"{ident}><tbody>{rows}</tbody></table></div>'


def figure(svg: str | None, *, plot_id: str, caption: str) -> str:
    """A plot container `figure.plot#<plot_id>` holding inline SVG and its caption (or a no-data note)."""
    if not svg:
        return f'<p class="nodata" id="{esc(plot_id)}-nodata">No data for this plot: {esc(caption)}</p>'
    return (f'<figure class="plot" id="{esc(plot_id)}">{svg}'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def fold(summary: str, body: str, *, fold_id: str | None = None, open_: bool = False) -> str:
    """`body` folded under a one-line `summary` (`<details>`): detail a reader opens when needed."""
    ident = f' id="{esc(fold_id)}"' if fold_id else ""
    return (f'<details class="fold"{ident}{" open" if open_ else ""}><summary>{esc(summary)}</summary>'
            f"{body}</details>")


def section(section_id: str, title: str, body: str) -> str:
    return f'<section id="{esc(section_id)}"><h2>{esc(title)}</h2>{body}</section>'


_CSS = """
:root{--fg:#1d232b;--muted:#5b6673;--line:#d8dde3;--bg:#fff;--band:#f4f6f8;--pass:#1b7f3b;
--fail:#b3261e;--inconclusive:#b58900;--invalid:#8a4b00;--insufficient:#5a4fb3}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
background:var(--bg);margin:0}
main{max-width:1180px;margin:0 auto;padding:20px 28px 60px}
h1{font-size:1.55em;margin:.2em 0 .1em}h2{font-size:1.2em;margin:1.8em 0 .5em;padding-bottom:.2em;
border-bottom:2px solid var(--line)}h3{font-size:1.02em;margin:1.2em 0 .4em}
nav{font-size:.9em;color:var(--muted);margin:.3em 0 1em}nav a{color:inherit;margin-right:.9em}
.answer{border:2px solid var(--line);border-radius:8px;padding:14px 18px;background:var(--band)}
.answer .q{color:var(--muted);margin:0 0 .5em}.answer .a{font-size:1.12em;margin:.2em 0}
.badge{display:inline-block;padding:1px 9px;border-radius:10px;color:#fff;font-weight:600;
font-size:.9em}.b-pass{background:var(--pass)}.b-fail{background:var(--fail)}
.b-inconclusive{background:var(--inconclusive)}.b-invalid{background:var(--invalid)}
.b-insufficient{background:var(--insufficient)}
.b-unknown{background:var(--muted)}
.scroll{overflow-x:auto;margin:.4em 0 .8em}
table{border-collapse:collapse;font-size:.86em}th,td{border:1px solid var(--line);padding:3px 7px;
text-align:left;vertical-align:top}thead th{background:var(--band);position:sticky;top:0;cursor:pointer}
td.num{text-align:right;font-variant-numeric:tabular-nums}table.kv th{background:var(--band);
font-weight:500;white-space:nowrap}
td.v-pass{color:var(--pass);font-weight:600}td.v-fail{color:var(--fail);font-weight:600}
td.v-inconclusive{color:var(--inconclusive);font-weight:600}td.v-invalid{color:var(--invalid);font-weight:600}td.v-insufficient{color:var(--insufficient);
font-weight:600}tr.not-run td{color:var(--muted);background:#fafafa}
figure.plot{margin:1em 0 1.6em;border:1px solid var(--line);border-radius:6px;padding:8px}
figure.plot svg{display:block;max-width:100%;height:auto;margin:0 auto}
figcaption{font-size:.88em;color:var(--muted);margin-top:.3em}
.warnings li{margin:.2em 0}.warnings{border-left:4px solid var(--invalid);padding:.3em 1em;
background:#fff8ef}
.nodata{color:var(--muted);font-style:italic}.muted{color:var(--muted)}
code{background:var(--band);padding:0 3px;border-radius:3px}
details.fold{margin:.4em 0 .8em}details.fold>summary{cursor:pointer;color:var(--muted);font-size:.92em}
"""

# Click a table header to sort by that column (numbers numerically, blanks last). Nothing else.
_JS = """
document.querySelectorAll('table.data thead th').forEach(function(th){
 th.addEventListener('click',function(){
  var t=th.closest('table'),b=t.tBodies[0],i=Array.prototype.indexOf.call(th.parentNode.children,th);
  var dir=th.dataset.dir==='asc'?'desc':'asc';th.dataset.dir=dir;
  var rows=Array.prototype.slice.call(b.rows);
  rows.sort(function(r1,r2){var a=r1.cells[i].textContent,c=r2.cells[i].textContent;
   if(a===''&&c==='')return 0;if(a==='')return 1;if(c==='')return -1;
   var x=parseFloat(a),y=parseFloat(c),k=(!isNaN(x)&&!isNaN(y))?x-y:a.localeCompare(c);
   return dir==='asc'?k:-k;});
  rows.forEach(function(r){b.appendChild(r);});});});
"""


def page(title: str, body: str, *, nav: Sequence[tuple[str, str]] = ()) -> str:
    """A whole self-contained HTML document."""
    links = "".join(f'<a href="#{esc(anchor)}">{esc(text)}</a>' for anchor, text in nav)
    nav_html = f"<nav>{links}</nav>" if links else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{_CSS}</style></head><body><main>"
            f"<h1>{esc(title)}</h1>{nav_html}{body}</main><script>{_JS}</script></body></html>\n")
