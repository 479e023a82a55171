"""Stage 0: input files in the competition's schema, from the demo generator or converted
from public knowledge-tracing data sets."""
