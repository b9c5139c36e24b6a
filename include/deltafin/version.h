// The engine's version string, shared by the CLI, the server and logs.
#pragma once

namespace deltafin {
inline constexpr const char* kVersion = "0.1.0";
}  // namespace deltafin
