// Counter-based random numbers for synthetic weights: value i of a stream is a pure function of
// (key, i), so chunks of any size, in any order or on any thread give byte-identical files.
#pragma once

#include <cstdint>
#include <string_view>

namespace deltafin::synth {

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijective 64-bit mixer whose outputs on
// consecutive counters pass BigCrush; ~1 ns per 8 bytes.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Word i of the stream named by key (the SplitMix64 sequence seeded with key, addressed directly).
inline uint64_t stream_word(uint64_t key, uint64_t i) {
  return mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
}

// FNV-1a, to turn a tensor name into part of its stream key.
inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

// The stream key of one tensor: independent of every other tensor and of how the file is cut.
inline uint64_t tensor_key(uint64_t seed, std::string_view name) {
  return mix64(mix64(seed) ^ fnv1a64(name));
}

// A uniform value in (-1, 1) from 16 random bits, symmetric around 0.
inline float unit_from16(uint32_t bits16) {
  return (static_cast<float>(bits16) - 32767.5f) * (1.0f / 32768.0f);
}

}  // namespace deltafin::synth
