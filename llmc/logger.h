// logger.h — rank 0's run logs (host only), shared by both engines.
//   DIR/main.log       llm.c-compatible lines: "s:%d trl:%f" (train loss), "s:%d tel:%f" (val loss)
//   DIR/metrics.jsonl  one JSON object per line: every figure of the step line, plus extras
// A fresh run truncates both files; a resumed run appends (earlier lines stay, llm.c style).
// With no output directory the logger is inert.
#pragma once
#include <cmath>
#include <cstdio>
#include <string>
#include "utils.h"

typedef struct {
    FILE* main_log;
    FILE* metrics;
} Logger;

static inline void logger_init(Logger* lg, const std::string& dir, bool append) {
    lg->main_log = NULL;
    lg->metrics = NULL;
    if (dir.empty()) return;
    const char* mode = append ? "a" : "w";
    lg->main_log = fopen_check((dir + "/main.log").c_str(), mode);
    lg->metrics = fopen_check((dir + "/metrics.jsonl").c_str(), mode);
}

// JSON has no NaN/Inf literals: write them as null.
static inline void logger_json_number(std::string* out, double x) {
    char b[64];
    if (std::isfinite(x)) snprintf(b, sizeof(b), "%.9g", x); else snprintf(b, sizeof(b), "null");
    *out += b;
}

// A builder for one metrics line: logger_field(&line, "loss", 2.5) ... logger_metrics(lg, line).
static inline void logger_field(std::string* line, const char* key, double value) {
    *line += line->empty() ? "{" : ", ";
    *line += "\""; *line += key; *line += "\": ";
    logger_json_number(line, value);
}
static inline void logger_field_str(std::string* line, const char* key, const std::string& value) {
    *line += line->empty() ? "{" : ", ";
    *line += "\""; *line += key; *line += "\": \"";
    for (char ch : value) { if (ch == '"' || ch == '\\') *line += '\\'; *line += ch; }
    *line += "\"";
}

// A value that is already JSON (an object or a list).
static inline void logger_field_json(std::string* line, const char* key, const std::string& json) {
    *line += line->empty() ? "{" : ", ";
    *line += "\""; *line += key; *line += "\": ";
    *line += json;
}

static inline void logger_metrics(Logger* lg, const std::string& line) {
    if (!lg->metrics) return;
    fprintf(lg->metrics, "%s}\n", line.c_str());
    fflush(lg->metrics);
}

static inline void logger_train(Logger* lg, int step, float loss) {
    if (!lg->main_log) return;
    fprintf(lg->main_log, "s:%d trl:%f\n", step, loss);
    fflush(lg->main_log);
}

static inline void logger_val(Logger* lg, int step, float loss) {
    if (!lg->main_log) return;
    fprintf(lg->main_log, "s:%d tel:%f\n", step, loss);
    fflush(lg->main_log);
}

static inline void logger_free(Logger* lg) {
    if (lg->main_log) fclose(lg->main_log);
    if (lg->metrics) fclose(lg->metrics);
    lg->main_log = lg->metrics = NULL;
}
