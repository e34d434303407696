"""HTTP routes (one module per resource under routes/) and their dependencies."""
