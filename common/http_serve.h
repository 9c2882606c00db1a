// Running a cpp-httplib server on a thread of its own, so that it can always be stopped.
#pragma once

#include <thread>

namespace httplib {
class Server;
}

namespace kubetrain {

// Runs the accept loop of `server`, already bound (bind_to_port, bind_to_any_port), on a new
// thread, and returns that thread once the loop runs. httplib's Server::stop() does nothing until
// then, so a server told to stop at once (a SIGTERM just after start) would serve on and the join
// would never return. Waits at most 5 s for the loop.
std::thread ServeInBackground(httplib::Server& server);

}  // namespace kubetrain
