// A variant's engine flags as words (`deltafin eval --variant '--experts stream'`): split one
// string as a shell would (spaces, '...' and "..." quotes), and lay one set of flags over another.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deltafin::eval {

// "--experts stream --read-piece 8K" -> {"--experts", "stream", "--read-piece", "8K"}: split at
// whitespace; '...' and "..." quote a part holding spaces. Throws base::Error on an unclosed quote.
std::vector<std::string> split_flags(std::string_view text);

// `base` with each option of `over` replacing the same option of `base` (in its place) or, when
// `base` lacks it, added after. An option is `--key`, `--key=value` or `--key value` (value: the
// next word unless it starts with "--"), as the command's argument parser reads them; a word that
// is not an option stays where it is, for the parser to refuse.
std::vector<std::string> merge_flags(const std::vector<std::string>& base,
                                     const std::vector<std::string>& over);

}  // namespace deltafin::eval
