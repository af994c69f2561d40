"""ElementTree helpers the HTML reports share: an element with text and a class, a
section with its heading, a table with its header row. Text set on an element is escaped
by the serializer, never concatenated into markup."""

from __future__ import annotations

import xml.etree.ElementTree as ET


def add_element(parent: ET.Element, tag: str, text: str | None = None, cls: str | None = None,
                **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, tag, attrs)
    if cls:
        element.set("class", cls)
    if text is not None:
        element.text = text
    return element


def add_section(parent: ET.Element, title: str, cls: str | None = None) -> ET.Element:
    section = add_element(parent, "section", cls=cls)
    add_element(section, "h2", title)
    return section


def add_table(parent: ET.Element, headers: list[tuple[str, str]],
              table_id: str | None = None) -> ET.Element:
    """A table with a header row; returns its tbody. Header pairs are (text, css class)."""
    table = add_element(parent, "table", **({"id": table_id} if table_id else {}))
    row = add_element(add_element(table, "thead"), "tr")
    for header, cls in headers:
        add_element(row, "th", header, cls=cls or None)
    return add_element(table, "tbody")


def add_banner(parent: ET.Element, state: str, badge: str, label: str, title: str,
               facts: str) -> tuple[ET.Element, ET.Element]:
    """The reports' top banner (`state`: passed, failed, other... colours it): a big badge
    (`badge`: pass, fail or other) reading `label`, the title, and a line of facts under
    them. Returns (banner, its left column), for the verdict beside or under the heading."""
    banner = add_element(parent, "div", cls=f"banner {state}")
    left = add_element(banner, "div")
    heading = add_element(left, "h1")
    add_element(heading, "span", label, cls=f"badge big {badge}")
    add_element(heading, "span", title)
    add_element(left, "div", facts, cls="sub")
    return banner, left
