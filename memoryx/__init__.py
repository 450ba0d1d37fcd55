"""memoryx: the weight store and optimizer service of a weight-streaming cluster.

Will model MemoryX's dense and sparse (CSR) weight copies, streaming to CS-2 systems and the
optimizer update, at stream/transaction level. Status: not yet built.
"""
