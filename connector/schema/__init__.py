"""Arrow schema algebra and the columns lakesink adds to every row: one definition each, for both roles."""
