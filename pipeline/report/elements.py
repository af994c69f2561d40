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
