"""The control-topic protocol: versioned messages and the one channel that does all control-topic I/O."""
