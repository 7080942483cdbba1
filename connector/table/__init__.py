"""Delta access: recovery of offsets, the commit recipe with its manifests, data files and the Delta log."""
