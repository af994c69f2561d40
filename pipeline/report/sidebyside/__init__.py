"""The side-by-side report of `compare`: one model served by two kinds, in the terminal, HTML
(+ charts) and markdown, all read through `views`."""
