// One accepted client connection: reads requests under a header deadline and size limit,
// then either turns into a CONNECT tunnel or forwards absolute-form HTTP requests with
// keep-alive on both sides. Every refusal gets an answer and an audit row.
#pragma once

#include <memory>

#include "context.hpp"
#include "sluice/base/net.hpp"

namespace sluice::proxy {

/// Serves `socket` (whose executor is its own strand) for `listener`.
void startClientConnection(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
                           tcp::socket socket);

}  // namespace sluice::proxy
