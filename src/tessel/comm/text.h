#pragma once
// Text between ranks (checkpoint metadata, error messages), as i64 words: the communicators move
// typed elements, and text is small next to tensors.
#include <string>

#include "tessel/comm/communicator.h"

namespace tessel::comm {

void send_text(Communicator& c, const std::string& text, int dst, int tag);
std::string recv_text(Communicator& c, int src, int tag);  // tag: the sender's
// root's text on every rank (collective).
std::string broadcast_text(Communicator& c, const std::string& text, int root);

}  // namespace tessel::comm
