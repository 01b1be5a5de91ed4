"""Files in and out: strict YAML reading (`yamlio`), model bundles (`bundle`), what a run
hands to the writer (`runrecord`) and the result store (`results`; docs/formats.md).
This layer imports nothing else of the package, so every other layer may use it."""
