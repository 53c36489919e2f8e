#pragma once
// Members through which a const method sees a const object: std::experimental::propagate_const
// around a pointer. A module's const methods (shape queries, accessors) then cannot write the
// parameter store, the FP8 state or a submodule they reach through such a member; the compiler
// checks "const methods do not write" instead of a reviewer. Methods that write (forward records
// FP8 amaxes and caches quantised weights, backward accumulates gradients) are not const.
//   DeepConstPtr<T>    a pointer the owner does not own (the ParamStore a module registered in)
//   DeepConstOwner<T>  a std::unique_ptr (a submodule)
#include <experimental/propagate_const>
#include <memory>

namespace tessel {

template <class T>
using DeepConstPtr = std::experimental::propagate_const<T*>;
template <class T>
using DeepConstOwner = std::experimental::propagate_const<std::unique_ptr<T>>;

}  // namespace tessel
