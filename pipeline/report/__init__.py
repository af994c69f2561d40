"""Reports rendered from a run record: terminal, HTML (+ charts), markdown, formats."""
