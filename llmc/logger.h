// logger.h — rank 0's run logs (host only), shared by both engines.
//   DIR/main.log       llm.c-compatible lines: "s:%d trl:%f" (train loss), "s:%d tel:%f" (val loss)
//   DIR/metrics.jsonl  one JSON object per line: every figure of the step line, plus extras
// A fresh run truncates both files. A run resumed from step s first cuts each file before its
// first line past s (main.log "s:N ...", metrics.jsonl "\"step\": N" with N > s: the rows of the
// run that was interrupted after s), says so in one line, then appends: one row per step.
// With no output directory the logger is inert. Every line is written and flushed with its
// result checked: a full disk stops the run with one line naming the file.
#pragma once
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <string>
#include <unistd.h>
#include "utils.h"

typedef struct {
    FILE* main_log;
    FILE* metrics;
    std::string main_log_path, metrics_path;
} Logger;

static inline FILE* logger_open(const std::string& path, const char* mode) {
    FILE* f = fopen(path.c_str(), mode);
    if (!f) user_error("cannot open log file '%s' for writing (%s)", path.c_str(), strerror(errno));
    return f;
}

// The step a log line is of (-1: none): main.log's "s:N ", metrics.jsonl's "\"step\": N".
static inline long logger_line_step(const std::string& line, bool json) {
    const char* key = json ? "\"step\": " : "s:";
    size_t at = json ? line.find(key) : (line.compare(0, 2, key) == 0 ? 0 : std::string::npos);
    if (at == std::string::npos) return -1;
    const char* p = line.c_str() + at + strlen(key);
    char* end = NULL;
    long n = strtol(p, &end, 10);
    return end == p ? -1 : n;
}

// Cuts `path` before its first line of a step past `step`; returns the lines cut (0 when the file
// is missing). An unreadable or uncuttable file is an error naming it.
static inline long logger_cut_after(const std::string& path, int step, bool json) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
        if (errno == ENOENT) return 0;
        user_error("cannot read log file '%s' to resume it (%s)", path.c_str(), strerror(errno));
    }
    std::string line;
    long offset = 0, cut_at = -1, cut = 0;
    int ch;
    while (true) {
        line.clear();
        long start = offset;
        while ((ch = fgetc(f)) != EOF) { offset++; line += (char)ch; if (ch == '\n') break; }
        if (line.empty()) break;
        if (cut_at < 0 && logger_line_step(line, json) > step) cut_at = start;
        if (cut_at >= 0) cut++;
    }
    const bool read_error = ferror(f) != 0;
    fclose(f);
    if (read_error) user_error("cannot read log file '%s' to resume it (%s)", path.c_str(), strerror(EIO));
    if (cut_at >= 0 && truncate(path.c_str(), (off_t)cut_at) != 0)
        user_error("cannot cut log file '%s' at step %d to resume it (%s)", path.c_str(), step, strerror(errno));
    return cut;
}

// resume_step > 0: a run resumed from that step (see the top of this file); 0: a fresh run.
static inline void logger_init(Logger* lg, const std::string& dir, int resume_step) {
    lg->main_log = NULL;
    lg->metrics = NULL;
    if (dir.empty()) return;
    lg->main_log_path = dir + "/main.log";
    lg->metrics_path = dir + "/metrics.jsonl";
    if (resume_step > 0) {
        long a = logger_cut_after(lg->main_log_path, resume_step, false), b = logger_cut_after(lg->metrics_path, resume_step, true);
        if (a > 0 || b > 0)
            printf("logs: removed the interrupted run's rows past step %d (%ld of main.log, %ld of metrics.jsonl)\n", resume_step, a, b);
    }
    const char* mode = resume_step > 0 ? "a" : "w";
    lg->main_log = logger_open(lg->main_log_path, mode);
    lg->metrics = logger_open(lg->metrics_path, mode);
}

// Writes one whole line and flushes it; any failure is an error naming the file.
static inline void logger_write(FILE* f, const std::string& path, const std::string& line) {
    errno = 0;
    if (fwrite(line.data(), 1, line.size(), f) != line.size() || fflush(f) != 0)
        user_error("cannot write log file '%s' (%s)", path.c_str(), strerror(errno ? errno : EIO));
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
    logger_write(lg->metrics, lg->metrics_path, line + "}\n");
}

static inline void logger_train(Logger* lg, int step, float loss) {
    if (!lg->main_log) return;
    char b[96];
    snprintf(b, sizeof(b), "s:%d trl:%f\n", step, loss);
    logger_write(lg->main_log, lg->main_log_path, b);
}

static inline void logger_val(Logger* lg, int step, float loss) {
    if (!lg->main_log) return;
    char b[96];
    snprintf(b, sizeof(b), "s:%d tel:%f\n", step, loss);
    logger_write(lg->main_log, lg->main_log_path, b);
}

static inline void logger_free(Logger* lg) {
    if (lg->main_log && fclose(lg->main_log) != 0) user_error("cannot write log file '%s' (%s)", lg->main_log_path.c_str(), strerror(errno));
    if (lg->metrics && fclose(lg->metrics) != 0) user_error("cannot write log file '%s' (%s)", lg->metrics_path.c_str(), strerror(errno));
    lg->main_log = lg->metrics = NULL;
}
