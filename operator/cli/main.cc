#include <iostream>
#include <string>
#include <vector>

#include "operator/cli/commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return kubetrain::cli::Main(args, std::cout, std::cerr);
}
