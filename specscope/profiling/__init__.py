"""Measuring real steps: time torch models (`measure`), fit a profile's runtime terms to those
timings (`calibrate`, behind `profile-hw`) and fit the shipped profiles to published tables (`fit`).

Kept apart from `hw_profiles/`, which only reads profile data, as Vidur keeps `profiling/` apart
from the execution-time predictor that reads its tables.
"""
