"""Pure statistics, tested by what they claim: intervals, multiplicity corrections, power,
sequential stopping, the knee. Imports nothing of the project (numpy, scipy, statsmodels only).
"""
