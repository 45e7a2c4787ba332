// libpq, loaded the first time a PostgreSQL function is called. Linking it would load about
// twenty libraries (Kerberos, LDAP, SASL, GnuTLS, ...) into every sluice process: ~3.5 ms on
// each `sluice run` start, for what only `audit ship` and a PostgreSQL `audit verify`/`sql`
// use. These are definitions of the libpq functions sluice calls, each forwarding to the one
// dlopen finds in libpq.so.5; libpq-fe.h declares them, so the compiler checks every signature.
// Without libpq, PQconnectdb returns null and libpqMissing() says why (pgError reports it).
#include <dlfcn.h>
#include <libpq-fe.h>

#include <string>
#include <type_traits>

#include "pg_conn.hpp"

namespace sluice::audit::detail {
namespace {

struct Libpq {
  void* handle = nullptr;
  std::string error;
};

const Libpq& libpq() {
  static const Libpq lib = [] {
    Libpq l;
    l.handle = dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (!l.handle) {
      const char* e = dlerror();
      l.error = e ? e : "libpq.so.5 not found";
    }
    return l;
  }();
  return lib;
}

/// libpq's `name`, or null when libpq (or the symbol) is missing.
template <typename Fn>
Fn symbol(const char* name) {
  static_assert(std::is_pointer_v<Fn>);
  const Libpq& l = libpq();
  return l.handle ? reinterpret_cast<Fn>(dlsym(l.handle, name)) : nullptr;
}

}  // namespace

std::string libpqMissing() {
  const Libpq& l = libpq();
  return l.handle ? std::string() : "cannot load libpq (install libpq5): " + l.error;
}

}  // namespace sluice::audit::detail

using sluice::audit::detail::symbol;

// Each forwards, or answers as libpq does for a null connection or result.
#define SLUICE_PQ(name) static const auto fn = symbol<decltype(&::name)>(#name)

extern "C" {

PGconn* PQconnectdb(const char* conninfo) {
  SLUICE_PQ(PQconnectdb);
  return fn ? fn(conninfo) : nullptr;
}
void PQfinish(PGconn* conn) {
  SLUICE_PQ(PQfinish);
  if (fn) fn(conn);
}
ConnStatusType PQstatus(const PGconn* conn) {
  SLUICE_PQ(PQstatus);
  return fn ? fn(conn) : CONNECTION_BAD;
}
char* PQerrorMessage(const PGconn* conn) {
  SLUICE_PQ(PQerrorMessage);
  static char none[] = "libpq is not loaded";
  return fn ? fn(conn) : none;
}
PQnoticeProcessor PQsetNoticeProcessor(PGconn* conn, PQnoticeProcessor proc, void* arg) {
  SLUICE_PQ(PQsetNoticeProcessor);
  return fn ? fn(conn, proc, arg) : nullptr;
}
PGresult* PQexec(PGconn* conn, const char* query) {
  SLUICE_PQ(PQexec);
  return fn ? fn(conn, query) : nullptr;
}
PGresult* PQexecParams(PGconn* conn, const char* command, int nParams, const Oid* paramTypes,
                       const char* const* paramValues, const int* paramLengths,
                       const int* paramFormats, int resultFormat) {
  SLUICE_PQ(PQexecParams);
  return fn ? fn(conn, command, nParams, paramTypes, paramValues, paramLengths, paramFormats,
                 resultFormat)
            : nullptr;
}
ExecStatusType PQresultStatus(const PGresult* res) {
  SLUICE_PQ(PQresultStatus);
  return fn ? fn(res) : PGRES_FATAL_ERROR;
}
int PQntuples(const PGresult* res) {
  SLUICE_PQ(PQntuples);
  return fn ? fn(res) : 0;
}
int PQnfields(const PGresult* res) {
  SLUICE_PQ(PQnfields);
  return fn ? fn(res) : 0;
}
char* PQfname(const PGresult* res, int field_num) {
  SLUICE_PQ(PQfname);
  return fn ? fn(res, field_num) : nullptr;
}
Oid PQftype(const PGresult* res, int field_num) {
  SLUICE_PQ(PQftype);
  return fn ? fn(res, field_num) : 0;
}
char* PQgetvalue(const PGresult* res, int tup_num, int field_num) {
  SLUICE_PQ(PQgetvalue);
  return fn ? fn(res, tup_num, field_num) : nullptr;
}
int PQgetisnull(const PGresult* res, int tup_num, int field_num) {
  SLUICE_PQ(PQgetisnull);
  return fn ? fn(res, tup_num, field_num) : 1;
}
int PQgetlength(const PGresult* res, int tup_num, int field_num) {
  SLUICE_PQ(PQgetlength);
  return fn ? fn(res, tup_num, field_num) : 0;
}
void PQclear(PGresult* res) {
  SLUICE_PQ(PQclear);
  if (fn) fn(res);
}
PGresult* PQgetResult(PGconn* conn) {
  SLUICE_PQ(PQgetResult);
  return fn ? fn(conn) : nullptr;
}
int PQputCopyData(PGconn* conn, const char* buffer, int nbytes) {
  SLUICE_PQ(PQputCopyData);
  return fn ? fn(conn, buffer, nbytes) : -1;
}
int PQputCopyEnd(PGconn* conn, const char* errormsg) {
  SLUICE_PQ(PQputCopyEnd);
  return fn ? fn(conn, errormsg) : -1;
}
void PQfreemem(void* ptr) {
  SLUICE_PQ(PQfreemem);
  if (fn) fn(ptr);
}
char* PQescapeLiteral(PGconn* conn, const char* str, size_t len) {
  SLUICE_PQ(PQescapeLiteral);
  return fn ? fn(conn, str, len) : nullptr;
}

}  // extern "C"
