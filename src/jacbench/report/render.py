"""Markdown and HTML text of a report (the HTML page embeds the plots)."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from jacbench.record.markdown import markdown_safe
from jacbench.record.text import shown


def markdown_table(header: list[str], lines: list[list[str]]) -> str:
    """Our own, not pandas' to_markdown: that needs tabulate and does not escape user text."""

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(markdown_safe(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([row(header), row(["---"] * len(header)), *map(row, lines)])


WRAP_CHARS = 40  # a cell longer than this may wrap (a name, a reason); shorter ones never


def _cell(text: str) -> str:
    """A cell of a table: a short one (a time with its interval, a number) on one line, a
    long one (a name, a reason, an option list) broken anywhere, so no table widens the page."""
    shown = html.escape(text)
    return f"<td class='w'>{shown}</td>" if len(text) > WRAP_CHARS else f"<td>{shown}</td>"


def html_table(header: list[str], lines: list[list[str]]) -> str:
    """Our own, not pandas' to_html (the rows are formatted strings; it adds unused classes), in
    a box of the page's width that scrolls a table of too many columns, never the page."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(str(c)) for c in line) + "</tr>" for line in lines)
    return (
        f"<div class='t'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


PAGE_PX = 1100  # the page's width: no figure is shown wider (plots.MAX_WIDTH_IN)
STYLE = (
    f"body{{font-family:sans-serif;max-width:{PAGE_PX}px;margin:2em auto}}"
    "div.t{max-width:100%;overflow-x:auto}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
    "padding:3px 8px;font-size:13px}th{background:#eee}"
    "td{white-space:nowrap}td.w{white-space:normal;overflow-wrap:anywhere;min-width:16em}"
    "figure{margin:1em 0}img{max-width:100%;height:auto}"
)


class Document:
    """Builds the markdown and the HTML versions of one report side by side."""

    def __init__(self, title: str) -> None:
        self.md = [f"# {markdown_safe(title)}", ""]
        self.html = [
            f"<!doctype html><html><head><meta charset='utf-8'><title>"
            f"{html.escape(title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
        ]

    def heading(self, text: str, level: int = 2) -> None:
        self.md += [f"{'#' * level} {markdown_safe(text)}", ""]
        self.html.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def paragraph(self, text: str) -> None:
        self.md += [markdown_safe(text), ""]
        self.html.append(f"<p>{html.escape(text).replace('**', '')}</p>")

    def bullets(self, items: list[str]) -> None:
        self.md += [*(f"- {markdown_safe(item)}" for item in items), ""]
        listed = "".join(f"<li>{html.escape(i).replace('**', '')}</li>" for i in items)
        self.html.append(f"<ul>{listed}</ul>")

    def table(self, header: list[str], lines: list[list[str]]) -> None:
        self.md += [markdown_table(header, lines), ""]
        self.html.append(html_table(header, lines))

    def image(self, path: Path, caption: str, width: int) -> None:
        """A PNG shown ``width`` CSS px wide: the size its labels were chosen for (a
        browser would otherwise show it at its pixel width, or squeeze it to the page)."""
        alt = html.escape(caption, quote=True)
        shown = markdown_safe(caption)
        # markdown's own image: an HTML <img> tag (for its width) showed as text in MLflow's
        # artifact viewer; report.html keeps the width
        label = shown.replace("[", "(").replace("]", ")")  # inside ![...]
        self.md += [f"![{label}]({path.name})", "", f"*{shown}*", ""]
        data = base64.b64encode(path.read_bytes()).decode()
        self.html.append(
            f"<figure><img alt='{alt}' width='{width}' "
            f"src='data:image/png;base64,{data}'><figcaption>"
            f"{html.escape(caption)}</figcaption></figure>"
        )

    def write(self, folder: Path, stem: str = "report") -> tuple[Path, Path]:
        md, page = folder / f"{stem}.md", folder / f"{stem}.html"
        md.write_text(_shown_lines([*self.md, ""]))  # a name's escape sequences: escaped
        page.write_text(_shown_lines([*self.html, "</body></html>", ""]))
        return md, page


def _shown_lines(parts: list[str]) -> str:
    """The parts joined by line breaks, each line's control characters (a name's terminal
    escape sequences) written escaped: a report read with ``cat`` or ``less -R`` acts on none."""
    return "\n".join(shown(line) for part in parts for line in part.split("\n"))
