// Boost.Asio and Boost.Beast compiled once for the whole program (separate compilation keeps every
// other translation unit from instantiating them again).
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
