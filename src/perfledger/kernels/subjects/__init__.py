"""Subjects: solve() targets, their arguments and evidence, torch subjects, spec loading."""
