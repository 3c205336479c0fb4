"""Tests of the code of the benchmarks (bench/): parsers, generators, command lines."""
