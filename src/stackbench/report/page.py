"""The report's two documents from one list of built sections (report/section.py): report.md, and the one
offline HTML page (plotly.js inlined once; these machines have no internet, so no CDN)."""

from __future__ import annotations

import html

import plotly.offline

from stackbench.report.section import Section, html_of, markdown_of

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th:first-child,td:first-child{text-align:left}
.headline table{font-size:1em}.headline th{background:#f3f6fa}
.headline td:nth-child(-n+3),.headline th:nth-child(-n+3){text-align:left}
.caveats{background:#fff8e1;border-left:4px solid #f0b400;padding:.3em 1em;font-size:.88em}
.legend,.ref{font-size:.85em;color:#555}
.status{background:#eef5ff;border-left:4px solid #3b82f6;padding:.3em 1em}
.pager{font-size:.85em;margin:.3em 0}.pager input{width:18em}
"""


# A paginated, filterable view over rows embedded as JSON: a million-row table never becomes a million-row DOM.
PAGER_JS = """
function stackbenchPager(id){
  const box=document.getElementById(id), data=JSON.parse(box.querySelector('script').textContent);
  const body=box.querySelector('tbody'), info=box.querySelector('.info'), size=50; let page=0, shown=data.rows;
  function fmt(v){if(v===null)return '\\u2014'; if(typeof v!=='number')return v;
    if(Number.isInteger(v)||Math.abs(v)>=100)return String(Math.round(v)); return String(Number(v.toPrecision(3)));}
  function draw(){body.innerHTML=''; for(const r of shown.slice(page*size,(page+1)*size)){const tr=document.createElement('tr');
    for(const v of r){const td=document.createElement('td'); td.textContent=fmt(v); tr.appendChild(td);} body.appendChild(tr);}
    info.textContent=`rows ${shown.length?page*size+1:0}-${Math.min((page+1)*size,shown.length)} of ${shown.length}`;}
  box.querySelector('.filter').addEventListener('input',e=>{const q=e.target.value.toLowerCase();
    shown=data.rows.filter(r=>r.join(' ').toLowerCase().includes(q)); page=0; draw();});
  box.querySelector('.prev').addEventListener('click',()=>{if(page>0){page--;draw();}});
  box.querySelector('.next').addEventListener('click',()=>{if((page+1)*size<shown.length){page++;draw();}});
  draw();
}
"""


def markdown_document(heading: str, built: list[tuple[Section, list]]) -> str:
    lines = [f"# {heading}", ""]
    for section, parts in built:
        texts = [text for text in map(markdown_of, parts) if text is not None]
        if section.markdown and (texts or section.always):
            lines += [f"## {section.title}", "", *texts]
    return "\n".join(lines)


def html_document(heading: str, built: list[tuple[Section, list]]) -> str:
    body = ""
    for section, parts in built:
        if parts or section.always:
            inner = f"<h2>{html.escape(section.title, quote=False)}</h2>" + "".join(html_of(p, section.css) for p in parts)
            body += f"<div class='{section.boxed}'>{inner}</div>" if section.boxed else inner
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Stack comparison report</title>"
            f"<style>{STYLE}</style><script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script>"
            f"<script>{PAGER_JS}</script></head><body><h1>{html.escape(heading)}</h1>{body}</body></html>")
