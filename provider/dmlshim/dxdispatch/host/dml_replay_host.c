/*
 * dml_replay_host: run dmlshim's exported DirectML descriptors on DirectML.dll itself.
 *
 * Part of dmlshim (our own code; no Microsoft header is used or needed). Built by dmlshim with
 * mingw-w64 and run under Wine (or on Windows). It reads job folders written by
 * dmlshim/dxdispatch/host_jobs.py: each holds job.txt (buffers, operator descriptors, dispatches) and
 * the buffers' initial bytes; for each job it creates the DirectML operators, compiles and initializes
 * them, uploads the buffers, records the dispatches, and writes every buffer's final bytes back
 * (out<i>.bin) with result.txt saying what happened.
 *
 * Usage: dml_replay_host.exe RUN_DIR [DIRECTML_DLL [DLL_DIR]]
 *   RUN_DIR/jobs.txt lists job folders (relative to RUN_DIR), one a line; RUN_DIR/device.txt is written
 *   first (adapter, feature level, data types). Exit 0 when every job was attempted (each job's
 *   result.txt says ok or error), 3 on a GPU timeout, 4 on a crash, 5 when the device was removed
 *   (the caller restarts the host for the jobs left), 2 when no device could be created. DLL_DIR, when
 *   given, is searched for d3d12.dll, dxgi.dll and their companions before the system folder (the stack's
 *   own D3D12 layer, used under Wine with native-first DLL overrides).
 *
 * The DirectML declarations below are written from the published ABI (enum values, struct layouts,
 * interface IIDs and vtable order of DirectML.h, target version 0x6400) for the calls made here only.
 */
#define COBJMACROS
#define WIN32_LEAN_AND_MEAN
#include <initguid.h>
#include <windows.h>
#include <d3d12.h>
#include <dxgi1_4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* DirectML ABI (the subset used)                                                                 */

typedef enum { DML_TENSOR_TYPE_BUFFER_ = 1 } DML_TENSOR_TYPE_;
typedef enum { DML_BINDING_TYPE_NONE_ = 0, DML_BINDING_TYPE_BUFFER_ = 1 } DML_BINDING_TYPE_;
typedef enum { DML_FEATURE_TENSOR_DATA_TYPE_SUPPORT_ = 0, DML_FEATURE_FEATURE_LEVELS_ = 1 } DML_FEATURE_;

typedef struct {
    int DataType;
    unsigned Flags;
    UINT DimensionCount;
    const UINT *Sizes;
    const UINT *Strides;
    UINT64 TotalTensorSizeInBytes;
    UINT GuaranteedBaseOffsetAlignment;
} HOST_DML_BUFFER_TENSOR_DESC;

typedef struct { int Type; const void *Desc; } HOST_DML_TENSOR_DESC;
typedef struct { int Type; const void *Desc; } HOST_DML_OPERATOR_DESC;
typedef struct { int Type; const void *Desc; } HOST_DML_BINDING_DESC;
typedef struct { ID3D12Resource *Buffer; UINT64 Offset; UINT64 SizeInBytes; } HOST_DML_BUFFER_BINDING;
typedef struct { UINT RequiredDescriptorCount; UINT64 TemporaryResourceSize; UINT64 PersistentResourceSize; }
    HOST_DML_BINDING_PROPERTIES;
typedef struct { UINT RequestedFeatureLevelCount; const int *RequestedFeatureLevels; } HOST_DML_FL_QUERY;
typedef struct { int MaxSupportedFeatureLevel; } HOST_DML_FL_DATA;
typedef struct { int DataType; } HOST_DML_TYPE_QUERY;
typedef struct { BOOL IsSupported; } HOST_DML_TYPE_DATA;

typedef struct HostDmlObject HostDmlObject;
typedef struct HostDmlDevice HostDmlDevice;
typedef struct HostDmlBindingTable HostDmlBindingTable;
typedef struct HostDmlCommandRecorder HostDmlCommandRecorder;

typedef struct {
    HRESULT (STDMETHODCALLTYPE *QueryInterface)(void *self, REFIID riid, void **out);
    ULONG (STDMETHODCALLTYPE *AddRef)(void *self);
    ULONG (STDMETHODCALLTYPE *Release)(void *self);
    /* IDMLObject */
    void *GetPrivateData, *SetPrivateData, *SetPrivateDataInterface, *SetName;
    /* IDMLDeviceChild */
    void *GetDevice;
    /* IDMLDispatchable (IDMLPageable adds nothing): the 24-byte struct comes back through a pointer */
    HOST_DML_BINDING_PROPERTIES *(STDMETHODCALLTYPE *GetBindingProperties)(void *self,
                                                                        HOST_DML_BINDING_PROPERTIES *ret);
    /* IDMLOperatorInitializer only */
    HRESULT (STDMETHODCALLTYPE *Reset)(void *self, UINT count, void *const *operators);
} HostDmlObjectVtbl;
struct HostDmlObject { const HostDmlObjectVtbl *lpVtbl; };

typedef struct {
    HRESULT (STDMETHODCALLTYPE *QueryInterface)(void *self, REFIID riid, void **out);
    ULONG (STDMETHODCALLTYPE *AddRef)(void *self);
    ULONG (STDMETHODCALLTYPE *Release)(void *self);
    void *GetPrivateData, *SetPrivateData, *SetPrivateDataInterface, *SetName;
    HRESULT (STDMETHODCALLTYPE *CheckFeatureSupport)(HostDmlDevice *self, int feature, UINT query_size,
                                                     const void *query, UINT data_size, void *data);
    HRESULT (STDMETHODCALLTYPE *CreateOperator)(HostDmlDevice *self, const HOST_DML_OPERATOR_DESC *desc,
                                                REFIID riid, void **out);
    HRESULT (STDMETHODCALLTYPE *CompileOperator)(HostDmlDevice *self, void *op, UINT flags, REFIID riid,
                                                 void **out);
    HRESULT (STDMETHODCALLTYPE *CreateOperatorInitializer)(HostDmlDevice *self, UINT count,
                                                           void *const *operators, REFIID riid, void **out);
    HRESULT (STDMETHODCALLTYPE *CreateCommandRecorder)(HostDmlDevice *self, REFIID riid, void **out);
    HRESULT (STDMETHODCALLTYPE *CreateBindingTable)(HostDmlDevice *self, const void *desc, REFIID riid,
                                                    void **out);
    void *Evict, *MakeResident;
    HRESULT (STDMETHODCALLTYPE *GetDeviceRemovedReason)(HostDmlDevice *self);
    void *GetParentDevice;
} HostDmlDeviceVtbl;
struct HostDmlDevice { const HostDmlDeviceVtbl *lpVtbl; };

typedef struct {
    HRESULT (STDMETHODCALLTYPE *QueryInterface)(void *self, REFIID riid, void **out);
    ULONG (STDMETHODCALLTYPE *AddRef)(void *self);
    ULONG (STDMETHODCALLTYPE *Release)(void *self);
    void *GetPrivateData, *SetPrivateData, *SetPrivateDataInterface, *SetName;
    void *GetDevice;
    void (STDMETHODCALLTYPE *BindInputs)(HostDmlBindingTable *self, UINT count, const HOST_DML_BINDING_DESC *b);
    void (STDMETHODCALLTYPE *BindOutputs)(HostDmlBindingTable *self, UINT count, const HOST_DML_BINDING_DESC *b);
    void (STDMETHODCALLTYPE *BindTemporaryResource)(HostDmlBindingTable *self, const HOST_DML_BINDING_DESC *b);
    void (STDMETHODCALLTYPE *BindPersistentResource)(HostDmlBindingTable *self, const HOST_DML_BINDING_DESC *b);
    HRESULT (STDMETHODCALLTYPE *Reset)(HostDmlBindingTable *self, const void *desc);
} HostDmlBindingTableVtbl;
struct HostDmlBindingTable { const HostDmlBindingTableVtbl *lpVtbl; };

typedef struct {
    HRESULT (STDMETHODCALLTYPE *QueryInterface)(void *self, REFIID riid, void **out);
    ULONG (STDMETHODCALLTYPE *AddRef)(void *self);
    ULONG (STDMETHODCALLTYPE *Release)(void *self);
    void *GetPrivateData, *SetPrivateData, *SetPrivateDataInterface, *SetName;
    void *GetDevice;
    void (STDMETHODCALLTYPE *RecordDispatch)(HostDmlCommandRecorder *self, ID3D12CommandList *list,
                                             void *dispatchable, HostDmlBindingTable *table);
} HostDmlCommandRecorderVtbl;
struct HostDmlCommandRecorder { const HostDmlCommandRecorderVtbl *lpVtbl; };

typedef struct {
    void *Dispatchable;
    D3D12_CPU_DESCRIPTOR_HANDLE CPUDescriptorHandle;
    D3D12_GPU_DESCRIPTOR_HANDLE GPUDescriptorHandle;
    UINT SizeInDescriptors;
} HOST_DML_BINDING_TABLE_DESC;

DEFINE_GUID(HOST_IID_IDMLDevice, 0x6dbd6437, 0x96fd, 0x423f, 0xa9, 0x8c, 0xae, 0x5e, 0x7c, 0x2a, 0x57, 0x3f);
DEFINE_GUID(HOST_IID_IDMLOperator, 0x26caae7a, 0x3081, 0x4633, 0x95, 0x81, 0x22, 0x6f, 0xbe, 0x57, 0x69, 0x5d);
DEFINE_GUID(HOST_IID_IDMLCompiledOperator, 0x6b15e56a, 0xbf5c, 0x4902, 0x92, 0xd8, 0xda, 0x3a, 0x65, 0x0a,
            0xfe, 0xa4);
DEFINE_GUID(HOST_IID_IDMLOperatorInitializer, 0x427c1113, 0x435c, 0x469c, 0x86, 0x76, 0x4d, 0x5d, 0xd0, 0x72,
            0xf8, 0x13);
DEFINE_GUID(HOST_IID_IDMLBindingTable, 0x29c687dc, 0xde74, 0x4e3b, 0xab, 0x00, 0x11, 0x68, 0xf2, 0xfc, 0x3c,
            0xfc);
DEFINE_GUID(HOST_IID_IDMLCommandRecorder, 0xe6857a76, 0x2e3e, 0x4fdd, 0xbf, 0xf4, 0x5d, 0x2b, 0xa1, 0x0f, 0xb4,
            0x53);

typedef HRESULT(WINAPI *PFN_DMLCreateDevice1)(ID3D12Device *, UINT flags, int min_feature_level, REFIID, void **);
typedef HRESULT(WINAPI *PFN_CreateDXGIFactory1)(REFIID, void **);

#define DML_OBJ(p) ((HostDmlObject *)(p))
#define DML_RELEASE(p)                                                                                     \
    do {                                                                                                   \
        if (p) DML_OBJ(p)->lpVtbl->Release(p);                                                             \
        (p) = NULL;                                                                                        \
    } while (0)
#define COM_RELEASE(p)                                                                                     \
    do {                                                                                                   \
        if (p) IUnknown_Release((IUnknown *)(p));                                                          \
        (p) = NULL;                                                                                        \
    } while (0)

/* ---------------------------------------------------------------------------------------------- */
/* Exit codes and limits                                                                          */

#define EXIT_OK 0
#define EXIT_USAGE 1
#define EXIT_NO_DEVICE 2
#define EXIT_TIMEOUT 3
#define EXIT_CRASH 4
#define EXIT_REMOVED 5

#define MAX_BUFFERS 16
#define MAX_DISPATCHABLES 8
#define MAX_DISPATCHES 16
#define MAX_TENSORS 4
#define MAX_UINTS 4
#define MAX_DIMS 8
#define FENCE_TIMEOUT_MS 120000

static const int kFeatureLevels[] = {0x1000, 0x2000, 0x2100, 0x3000, 0x3100, 0x4000, 0x4100, 0x5000,
                                     0x5100, 0x5200, 0x6000, 0x6100, 0x6200, 0x6300, 0x6400};
#define FEATURE_LEVEL_COUNT ((int)(sizeof(kFeatureLevels) / sizeof(kFeatureLevels[0])))

/* ---------------------------------------------------------------------------------------------- */
/* The job, as read from job.txt                                                                  */

typedef struct {
    UINT64 size;
    char file[MAX_PATH];
} BufferSpec;

typedef struct {
    int data_type;
    unsigned flags;
    UINT dim_count;
    UINT sizes[MAX_DIMS];
    UINT strides[MAX_DIMS];
    int has_strides;
    UINT64 total;
    UINT alignment;
} TensorSpec;

typedef struct {
    int op_type;
    UINT exec_flags;
    int tensor_count; /* the last one is OutputTensor */
    int uint_count;
    TensorSpec tensors[MAX_TENSORS];
    UINT uints[MAX_UINTS];
} DispatchableSpec;

typedef struct {
    int dispatchable;
    int buffers[MAX_TENSORS];
} DispatchSpec;

typedef struct {
    int buffer_count;
    BufferSpec buffers[MAX_BUFFERS];
    int dispatchable_count;
    DispatchableSpec dispatchables[MAX_DISPATCHABLES];
    int dispatch_count;
    DispatchSpec dispatches[MAX_DISPATCHES];
} JobSpec;

/* ---------------------------------------------------------------------------------------------- */
/* Global state                                                                                   */

typedef struct {
    HMODULE dml_module;
    PFN_DMLCreateDevice1 create_dml;
    PFN_D3D12_CREATE_DEVICE create_d3d12;
    ID3D12Device *d3d;
    ID3D12CommandQueue *queue;
    ID3D12CommandAllocator *allocator;
    ID3D12GraphicsCommandList *list;
    ID3D12Fence *fence;
    UINT64 fence_value;
    HANDLE event;
    HostDmlDevice *dml;
    int created_feature_level;
    /* One shader-visible descriptor heap for every job: creating one is slow on vkd3d (seconds), and the
       jobs run one after another, each waiting for the GPU before the next records. */
    ID3D12DescriptorHeap *heap;
    UINT heap_capacity;
} Host;

static Host g_host;
static char g_result_path[MAX_PATH * 2];
static char g_stage[64] = "start";

static void write_text_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static LONG WINAPI on_crash(EXCEPTION_POINTERS *info) {
    char text[256];
    snprintf(text, sizeof text, "status crash\nstage %s\nhr 0x%08lx\nmessage unhandled exception at %p\n",
             g_stage, (unsigned long)info->ExceptionRecord->ExceptionCode,
             info->ExceptionRecord->ExceptionAddress);
    if (g_result_path[0]) write_text_file(g_result_path, text);
    fprintf(stderr, "dml_replay_host: %s", text);
    fflush(stderr);
    ExitProcess(EXIT_CRASH);
    return EXCEPTION_EXECUTE_HANDLER;
}

/* ---------------------------------------------------------------------------------------------- */
/* job.txt reader                                                                                 */

static int read_job(const char *path, JobSpec *job, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    char word[64];
    int version = 0;
    if (!f) {
        snprintf(err, err_size, "cannot open %s", path);
        return 0;
    }
    memset(job, 0, sizeof *job);
#define EXPECT(cond, what)                                                                                 \
    if (!(cond)) {                                                                                         \
        snprintf(err, err_size, "job.txt: %s", what);                                                      \
        fclose(f);                                                                                         \
        return 0;                                                                                          \
    }
    EXPECT(fscanf(f, "%63s %d", word, &version) == 2 && strcmp(word, "dmlreplay-job") == 0 && version == 1,
           "bad header");
    EXPECT(fscanf(f, "%63s %d", word, &job->buffer_count) == 2 && strcmp(word, "buffers") == 0 &&
               job->buffer_count > 0 && job->buffer_count <= MAX_BUFFERS,
           "bad buffers line");
    for (int i = 0; i < job->buffer_count; i++) {
        unsigned long long size;
        EXPECT(fscanf(f, "%63s %llu %259s", word, &size, job->buffers[i].file) == 3 && strcmp(word, "b") == 0,
               "bad buffer line");
        job->buffers[i].size = size;
    }
    EXPECT(fscanf(f, "%63s %d", word, &job->dispatchable_count) == 2 && strcmp(word, "dispatchables") == 0 &&
               job->dispatchable_count > 0 && job->dispatchable_count <= MAX_DISPATCHABLES,
           "bad dispatchables line");
    for (int i = 0; i < job->dispatchable_count; i++) {
        DispatchableSpec *d = &job->dispatchables[i];
        EXPECT(fscanf(f, "%63s %d %u %d %d", word, &d->op_type, &d->exec_flags, &d->tensor_count,
                      &d->uint_count) == 5 &&
                   strcmp(word, "op") == 0 && d->tensor_count >= 2 && d->tensor_count <= MAX_TENSORS &&
                   d->uint_count >= 0 && d->uint_count <= MAX_UINTS,
               "bad op line");
        for (int t = 0; t < d->tensor_count; t++) {
            TensorSpec *ts = &d->tensors[t];
            unsigned long long total;
            EXPECT(fscanf(f, "%63s %d %u %u %llu %u %d", word, &ts->data_type, &ts->flags, &ts->dim_count, &total,
                          &ts->alignment, &ts->has_strides) == 7 &&
                       strcmp(word, "t") == 0 && ts->dim_count >= 1 && ts->dim_count <= MAX_DIMS,
                   "bad tensor line");
            ts->total = total;
            for (UINT k = 0; k < ts->dim_count; k++) EXPECT(fscanf(f, "%u", &ts->sizes[k]) == 1, "bad sizes");
            if (ts->has_strides)
                for (UINT k = 0; k < ts->dim_count; k++)
                    EXPECT(fscanf(f, "%u", &ts->strides[k]) == 1, "bad strides");
        }
        EXPECT(fscanf(f, "%63s", word) == 1 && strcmp(word, "u") == 0, "bad uints line");
        for (int k = 0; k < d->uint_count; k++) EXPECT(fscanf(f, "%u", &d->uints[k]) == 1, "bad uint");
    }
    EXPECT(fscanf(f, "%63s %d", word, &job->dispatch_count) == 2 && strcmp(word, "dispatches") == 0 &&
               job->dispatch_count >= 0 && job->dispatch_count <= MAX_DISPATCHES,
           "bad dispatches line");
    for (int i = 0; i < job->dispatch_count; i++) {
        DispatchSpec *ds = &job->dispatches[i];
        EXPECT(fscanf(f, "%63s %d", word, &ds->dispatchable) == 2 && strcmp(word, "d") == 0 &&
                   ds->dispatchable >= 0 && ds->dispatchable < job->dispatchable_count,
               "bad dispatch line");
        for (int t = 0; t < job->dispatchables[ds->dispatchable].tensor_count; t++)
            EXPECT(fscanf(f, "%d", &ds->buffers[t]) == 1 && ds->buffers[t] >= 0 &&
                       ds->buffers[t] < job->buffer_count,
                   "bad binding");
    }
    EXPECT(fscanf(f, "%63s", word) == 1 && strcmp(word, "end") == 0, "missing end");
#undef EXPECT
    fclose(f);
    return 1;
}

/* ---------------------------------------------------------------------------------------------- */
/* D3D12 helpers                                                                                  */

static HRESULT make_buffer(D3D12_HEAP_TYPE heap, UINT64 size, D3D12_RESOURCE_FLAGS flags,
                           D3D12_RESOURCE_STATES state, ID3D12Resource **out) {
    D3D12_HEAP_PROPERTIES props;
    D3D12_RESOURCE_DESC desc;
    memset(&props, 0, sizeof props);
    memset(&desc, 0, sizeof desc);
    props.Type = heap;
    props.CreationNodeMask = 1;
    props.VisibleNodeMask = 1;
    desc.Dimension = D3D12_RESOURCE_DIMENSION_BUFFER;
    desc.Width = size;
    desc.Height = 1;
    desc.DepthOrArraySize = 1;
    desc.MipLevels = 1;
    desc.Format = DXGI_FORMAT_UNKNOWN;
    desc.SampleDesc.Count = 1;
    desc.Layout = D3D12_TEXTURE_LAYOUT_ROW_MAJOR;
    desc.Flags = flags;
    return ID3D12Device_CreateCommittedResource(g_host.d3d, &props, D3D12_HEAP_FLAG_NONE, &desc, state, NULL,
                                                &IID_ID3D12Resource, (void **)out);
}

static void transition(ID3D12Resource *res, D3D12_RESOURCE_STATES before, D3D12_RESOURCE_STATES after) {
    D3D12_RESOURCE_BARRIER b;
    memset(&b, 0, sizeof b);
    b.Type = D3D12_RESOURCE_BARRIER_TYPE_TRANSITION;
    b.Transition.pResource = res;
    b.Transition.Subresource = D3D12_RESOURCE_BARRIER_ALL_SUBRESOURCES;
    b.Transition.StateBefore = before;
    b.Transition.StateAfter = after;
    ID3D12GraphicsCommandList_ResourceBarrier(g_host.list, 1, &b);
}

static void uav_barrier(void) {
    D3D12_RESOURCE_BARRIER b;
    memset(&b, 0, sizeof b);
    b.Type = D3D12_RESOURCE_BARRIER_TYPE_UAV;
    b.UAV.pResource = NULL;
    ID3D12GraphicsCommandList_ResourceBarrier(g_host.list, 1, &b);
}

/* Close, execute and wait for the command list; reset it for the next recording. */
static HRESULT submit_and_wait(int *timed_out) {
    HRESULT hr = ID3D12GraphicsCommandList_Close(g_host.list);
    ID3D12CommandList *lists[1];
    *timed_out = 0;
    if (FAILED(hr)) return hr;
    lists[0] = (ID3D12CommandList *)g_host.list;
    ID3D12CommandQueue_ExecuteCommandLists(g_host.queue, 1, lists);
    g_host.fence_value++;
    hr = ID3D12CommandQueue_Signal(g_host.queue, g_host.fence, g_host.fence_value);
    if (FAILED(hr)) return hr;
    if (ID3D12Fence_GetCompletedValue(g_host.fence) < g_host.fence_value) {
        hr = ID3D12Fence_SetEventOnCompletion(g_host.fence, g_host.fence_value, g_host.event);
        if (FAILED(hr)) return hr;
        if (WaitForSingleObject(g_host.event, FENCE_TIMEOUT_MS) != WAIT_OBJECT_0) {
            *timed_out = 1;
            return HRESULT_FROM_WIN32(ERROR_TIMEOUT);
        }
    }
    hr = ID3D12CommandAllocator_Reset(g_host.allocator);
    if (FAILED(hr)) return hr;
    return ID3D12GraphicsCommandList_Reset(g_host.list, g_host.allocator, NULL);
}

/* ---------------------------------------------------------------------------------------------- */
/* Device creation and description                                                                */

static void wide_to_utf8(const WCHAR *w, char *out, int out_size) {
    if (!WideCharToMultiByte(CP_UTF8, 0, w, -1, out, out_size, NULL, NULL)) out[0] = 0;
}

static void print_file_version(FILE *info, const char *key, const WCHAR *path) {
    DWORD ignored = 0;
    DWORD size = GetFileVersionInfoSizeW(path, &ignored);
    void *data;
    VS_FIXEDFILEINFO *fixed = NULL;
    UINT fixed_size = 0;
    if (!size) return;
    data = malloc(size);
    if (data && GetFileVersionInfoW(path, 0, size, data) &&
        VerQueryValueW(data, L"\\", (void **)&fixed, &fixed_size) && fixed && fixed_size >= sizeof *fixed) {
        fprintf(info, "%s %lu.%lu.%lu.%lu\n", key, (unsigned long)HIWORD(fixed->dwFileVersionMS),
                (unsigned long)LOWORD(fixed->dwFileVersionMS), (unsigned long)HIWORD(fixed->dwFileVersionLS),
                (unsigned long)LOWORD(fixed->dwFileVersionLS));
    }
    free(data);
}

/* Load the stack's own D3D layer from dll_dir by full path, dependencies first, each with its folder
   searched for its imports; later loads by name (DirectML's, ours) then get these modules. */
static void preload_dll_dir(const char *dll_dir, FILE *info) {
    static const char *const names[] = {"wined3d.dll", "dxgi.dll", "d3d12core.dll", "d3d12.dll"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char full[MAX_PATH * 2];
        snprintf(full, sizeof full, "%s\\%s", dll_dir, names[i]);
        if (GetFileAttributesA(full) == INVALID_FILE_ATTRIBUTES) continue;
        if (!LoadLibraryExA(full, NULL, LOAD_WITH_ALTERED_SEARCH_PATH))
            fprintf(info, "warning %s not loadable (error %lu)\n", full, GetLastError());
    }
}

static int create_devices(const char *dml_path, const char *dll_dir, FILE *info) {
    HRESULT hr;
    HMODULE d3d12, dxgi;
    if (dll_dir && dll_dir[0]) preload_dll_dir(dll_dir, info);
    d3d12 = LoadLibraryA("d3d12.dll");
    dxgi = LoadLibraryA("dxgi.dll");
    IDXGIFactory1 *factory = NULL;
    IDXGIAdapter1 *adapter = NULL;
    D3D12_COMMAND_QUEUE_DESC qdesc;
    char name[256] = "";

    if (!d3d12) {
        fprintf(info, "error d3d12.dll not loadable (error %lu)\n", GetLastError());
        return 0;
    }
    g_host.create_d3d12 = (PFN_D3D12_CREATE_DEVICE)(void *)GetProcAddress(d3d12, "D3D12CreateDevice");
    g_host.dml_module = LoadLibraryA(dml_path);
    if (!g_host.dml_module) {
        fprintf(info, "error %s not loadable (error %lu)\n", dml_path, GetLastError());
        return 0;
    }
    g_host.create_dml = (PFN_DMLCreateDevice1)(void *)GetProcAddress(g_host.dml_module, "DMLCreateDevice1");
    if (!g_host.create_d3d12 || !g_host.create_dml) {
        fprintf(info, "error D3D12CreateDevice or DMLCreateDevice1 not exported\n");
        return 0;
    }
    {
        WCHAR module_path[MAX_PATH];
        char utf8[MAX_PATH * 3];
        GetModuleFileNameW(g_host.dml_module, module_path, MAX_PATH);
        wide_to_utf8(module_path, utf8, sizeof utf8);
        fprintf(info, "directml_dll %s\n", utf8);
        print_file_version(info, "directml_version", module_path);
        GetModuleFileNameW(d3d12, module_path, MAX_PATH);
        wide_to_utf8(module_path, utf8, sizeof utf8);
        fprintf(info, "d3d12_dll %s\n", utf8);
    }
    if (dxgi) {
        PFN_CreateDXGIFactory1 make_factory =
            (PFN_CreateDXGIFactory1)(void *)GetProcAddress(dxgi, "CreateDXGIFactory1");
        if (make_factory && SUCCEEDED(make_factory(&IID_IDXGIFactory1, (void **)&factory))) {
            if (SUCCEEDED(IDXGIFactory1_EnumAdapters1(factory, 0, &adapter))) {
                DXGI_ADAPTER_DESC1 desc;
                if (SUCCEEDED(IDXGIAdapter1_GetDesc1(adapter, &desc))) {
                    wide_to_utf8(desc.Description, name, sizeof name);
                    fprintf(info, "adapter %s\n", name);
                    fprintf(info, "adapter_ids vendor=0x%04x device=0x%04x\n", desc.VendorId, desc.DeviceId);
                }
            }
        } else {
            fprintf(info, "warning CreateDXGIFactory1 failed; using the default adapter\n");
        }
    }
    hr = g_host.create_d3d12((IUnknown *)adapter, D3D_FEATURE_LEVEL_11_0, &IID_ID3D12Device, (void **)&g_host.d3d);
    /* The adapter and factory stay alive for the whole process: under Wine, releasing the last DXGI factory
       can unload winevulkan.dll while vkd3d still calls into it. winevulkan is pinned for the same reason. */
    LoadLibraryA("winevulkan.dll");
    if (FAILED(hr)) {
        fprintf(info, "error D3D12CreateDevice hr=0x%08lx\n", (unsigned long)hr);
        return 0;
    }
    {
        D3D12_FEATURE_DATA_SHADER_MODEL sm;
        sm.HighestShaderModel = D3D_SHADER_MODEL_6_0;
        if (SUCCEEDED(ID3D12Device_CheckFeatureSupport(g_host.d3d, D3D12_FEATURE_SHADER_MODEL, &sm, sizeof sm)))
            fprintf(info, "shader_model 0x%x\n", (unsigned)sm.HighestShaderModel);
    }
    /* DMLCreateDevice1 at the highest feature level this DirectML.dll accepts. */
    hr = E_FAIL;
    for (int i = FEATURE_LEVEL_COUNT - 1; i >= 0; i--) {
        hr = g_host.create_dml(g_host.d3d, 0, kFeatureLevels[i], &HOST_IID_IDMLDevice, (void **)&g_host.dml);
        if (SUCCEEDED(hr)) {
            g_host.created_feature_level = kFeatureLevels[i];
            break;
        }
    }
    if (FAILED(hr)) {
        fprintf(info, "error DMLCreateDevice1 hr=0x%08lx\n", (unsigned long)hr);
        return 0;
    }
    fprintf(info, "created_feature_level 0x%x\n", g_host.created_feature_level);
    {
        HOST_DML_FL_QUERY q = {FEATURE_LEVEL_COUNT, kFeatureLevels};
        HOST_DML_FL_DATA d = {0};
        hr = g_host.dml->lpVtbl->CheckFeatureSupport(g_host.dml, DML_FEATURE_FEATURE_LEVELS_, sizeof q, &q,
                                                     sizeof d, &d);
        if (SUCCEEDED(hr)) fprintf(info, "max_feature_level 0x%x\n", d.MaxSupportedFeatureLevel);
    }
    fprintf(info, "data_types");
    for (int t = 1; t <= 13; t++) {
        HOST_DML_TYPE_QUERY q = {t};
        HOST_DML_TYPE_DATA d = {0};
        hr = g_host.dml->lpVtbl->CheckFeatureSupport(g_host.dml, DML_FEATURE_TENSOR_DATA_TYPE_SUPPORT_, sizeof q,
                                                     &q, sizeof d, &d);
        if (SUCCEEDED(hr) && d.IsSupported) fprintf(info, " %d", t);
    }
    fprintf(info, "\n");

    memset(&qdesc, 0, sizeof qdesc);
    qdesc.Type = D3D12_COMMAND_LIST_TYPE_DIRECT;
    hr = ID3D12Device_CreateCommandQueue(g_host.d3d, &qdesc, &IID_ID3D12CommandQueue, (void **)&g_host.queue);
    if (SUCCEEDED(hr))
        hr = ID3D12Device_CreateCommandAllocator(g_host.d3d, D3D12_COMMAND_LIST_TYPE_DIRECT,
                                                 &IID_ID3D12CommandAllocator, (void **)&g_host.allocator);
    if (SUCCEEDED(hr))
        hr = ID3D12Device_CreateCommandList(g_host.d3d, 0, D3D12_COMMAND_LIST_TYPE_DIRECT, g_host.allocator, NULL,
                                            &IID_ID3D12GraphicsCommandList, (void **)&g_host.list);
    if (SUCCEEDED(hr))
        hr = ID3D12Device_CreateFence(g_host.d3d, 0, D3D12_FENCE_FLAG_NONE, &IID_ID3D12Fence,
                                      (void **)&g_host.fence);
    if (FAILED(hr)) {
        fprintf(info, "error creating the D3D12 queue, list or fence hr=0x%08lx\n", (unsigned long)hr);
        return 0;
    }
    g_host.event = CreateEventA(NULL, FALSE, FALSE, NULL);
    fprintf(info, "ok\n");
    return 1;
}

static int device_removed(void) {
    return g_host.d3d && FAILED(ID3D12Device_GetDeviceRemovedReason(g_host.d3d));
}

/* ---------------------------------------------------------------------------------------------- */
/* One job                                                                                        */

typedef struct {
    ID3D12Resource *gpu[MAX_BUFFERS];
    ID3D12Resource *upload[MAX_BUFFERS];
    ID3D12Resource *readback[MAX_BUFFERS];
    UINT64 alloc_size[MAX_BUFFERS];
    void *ops[MAX_DISPATCHABLES];
    void *compiled[MAX_DISPATCHABLES];
    void *initializer;
    ID3D12Resource *persistent[MAX_DISPATCHABLES];
    ID3D12Resource *temporary;
    HostDmlBindingTable *table;
    HostDmlCommandRecorder *recorder;
} JobObjects;

static void release_job(JobObjects *o) {
    for (int i = 0; i < MAX_BUFFERS; i++) {
        COM_RELEASE(o->gpu[i]);
        COM_RELEASE(o->upload[i]);
        COM_RELEASE(o->readback[i]);
    }
    for (int i = 0; i < MAX_DISPATCHABLES; i++) {
        DML_RELEASE(o->ops[i]);
        DML_RELEASE(o->compiled[i]);
        COM_RELEASE(o->persistent[i]);
    }
    DML_RELEASE(o->initializer);
    COM_RELEASE(o->temporary);
    DML_RELEASE(o->table);
    DML_RELEASE(o->recorder);
}

typedef struct {
    char status[16]; /* ok, error, timeout */
    char stage[64];
    int index; /* the dispatchable or dispatch the stage concerns, or -1 */
    HRESULT hr;
    char message[512];
    double ms_compile, ms_init, ms_dispatch, ms_total;
} JobResult;

static double now_ms(void) {
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart * 1000.0 / (double)f.QuadPart;
}

static int fail(JobResult *r, const char *stage, int index, HRESULT hr, const char *message) {
    snprintf(r->status, sizeof r->status, "error");
    snprintf(r->stage, sizeof r->stage, "%s", stage);
    r->index = index;
    r->hr = hr;
    snprintf(r->message, sizeof r->message, "%s", message);
    return 0;
}

static UINT64 round_up(UINT64 v, UINT64 a) { return (v + a - 1) / a * a; }

/* Fill a DML_*_OPERATOR_DESC: the tensor pointers, then the UINT fields, as the C structs lay them out. */
static void build_operator_desc(const DispatchableSpec *d, HOST_DML_BUFFER_TENSOR_DESC *buffer_descs,
                                HOST_DML_TENSOR_DESC *tensor_descs, unsigned char *desc_bytes) {
    for (int t = 0; t < d->tensor_count; t++) {
        const TensorSpec *ts = &d->tensors[t];
        HOST_DML_BUFFER_TENSOR_DESC *b = &buffer_descs[t];
        b->DataType = ts->data_type;
        b->Flags = ts->flags;
        b->DimensionCount = ts->dim_count;
        b->Sizes = ts->sizes;
        b->Strides = ts->has_strides ? ts->strides : NULL;
        b->TotalTensorSizeInBytes = ts->total;
        b->GuaranteedBaseOffsetAlignment = ts->alignment;
        tensor_descs[t].Type = DML_TENSOR_TYPE_BUFFER_;
        tensor_descs[t].Desc = b;
        {
            const HOST_DML_TENSOR_DESC *p = &tensor_descs[t];
            memcpy(desc_bytes + t * sizeof(void *), &p, sizeof p);
        }
    }
    memcpy(desc_bytes + d->tensor_count * sizeof(void *), d->uints, d->uint_count * sizeof(UINT));
}

static int run_job(const JobSpec *job, const char *dir, JobResult *r) {
    JobObjects o;
    HRESULT hr;
    int timed_out = 0;
    char msg[512];
    char path[MAX_PATH * 2];
    UINT descriptor_total = 0;
    UINT descriptor_offset[MAX_DISPATCHES + 1];
    UINT init_descriptors = 0;
    HOST_DML_BINDING_PROPERTIES init_props, exec_props[MAX_DISPATCHABLES];
    UINT64 temp_size = 0;
    UINT handle_step;
    D3D12_CPU_DESCRIPTOR_HANDLE cpu0;
    D3D12_GPU_DESCRIPTOR_HANDLE gpu0;
    double t0;

    memset(&o, 0, sizeof o);
    memset(&init_props, 0, sizeof init_props);
    memset(exec_props, 0, sizeof exec_props);
    snprintf(r->status, sizeof r->status, "ok");
    r->stage[0] = 0;
    r->index = -1;
    r->hr = S_OK;

    /* Operators: create and compile. */
    t0 = now_ms();
    for (int i = 0; i < job->dispatchable_count; i++) {
        const DispatchableSpec *d = &job->dispatchables[i];
        HOST_DML_BUFFER_TENSOR_DESC buffer_descs[MAX_TENSORS];
        HOST_DML_TENSOR_DESC tensor_descs[MAX_TENSORS];
        unsigned char desc_bytes[MAX_TENSORS * sizeof(void *) + MAX_UINTS * sizeof(UINT)] __attribute__((aligned(8)));
        HOST_DML_OPERATOR_DESC op_desc;
        memset(desc_bytes, 0, sizeof desc_bytes);
        build_operator_desc(d, buffer_descs, tensor_descs, desc_bytes);
        op_desc.Type = d->op_type;
        op_desc.Desc = desc_bytes;
        snprintf(g_stage, sizeof g_stage, "create_operator");
        hr = g_host.dml->lpVtbl->CreateOperator(g_host.dml, &op_desc, &HOST_IID_IDMLOperator, &o.ops[i]);
        if (FAILED(hr)) {
            release_job(&o);
            return fail(r, "create_operator", i, hr, "IDMLDevice::CreateOperator refused the descriptor");
        }
        snprintf(g_stage, sizeof g_stage, "compile_operator");
        hr = g_host.dml->lpVtbl->CompileOperator(g_host.dml, o.ops[i], d->exec_flags, &HOST_IID_IDMLCompiledOperator,
                                                 &o.compiled[i]);
        if (FAILED(hr)) {
            release_job(&o);
            return fail(r, "compile_operator", i, hr, "IDMLDevice::CompileOperator failed");
        }
        DML_OBJ(o.compiled[i])->lpVtbl->GetBindingProperties(o.compiled[i], &exec_props[i]);
        if (exec_props[i].TemporaryResourceSize > temp_size) temp_size = exec_props[i].TemporaryResourceSize;
    }
    r->ms_compile = now_ms() - t0;

    snprintf(g_stage, sizeof g_stage, "create_initializer");
    hr = g_host.dml->lpVtbl->CreateOperatorInitializer(g_host.dml, job->dispatchable_count, o.compiled,
                                                       &HOST_IID_IDMLOperatorInitializer, &o.initializer);
    if (FAILED(hr)) {
        release_job(&o);
        return fail(r, "create_initializer", -1, hr, "IDMLDevice::CreateOperatorInitializer failed");
    }
    DML_OBJ(o.initializer)->lpVtbl->GetBindingProperties(o.initializer, &init_props);
    if (init_props.TemporaryResourceSize > temp_size) temp_size = init_props.TemporaryResourceSize;

    /* Descriptor ranges: the initializer first, then one range per dispatch. */
    init_descriptors = init_props.RequiredDescriptorCount;
    descriptor_total = init_descriptors;
    for (int i = 0; i < job->dispatch_count; i++) {
        descriptor_offset[i] = descriptor_total;
        descriptor_total += exec_props[job->dispatches[i].dispatchable].RequiredDescriptorCount;
    }
    if (descriptor_total > g_host.heap_capacity) {
        D3D12_DESCRIPTOR_HEAP_DESC hd;
        UINT capacity = descriptor_total > 1024 ? descriptor_total : 1024;
        COM_RELEASE(g_host.heap);
        g_host.heap_capacity = 0;
        memset(&hd, 0, sizeof hd);
        hd.Type = D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV;
        hd.NumDescriptors = capacity;
        hd.Flags = D3D12_DESCRIPTOR_HEAP_FLAG_SHADER_VISIBLE;
        hr = ID3D12Device_CreateDescriptorHeap(g_host.d3d, &hd, &IID_ID3D12DescriptorHeap, (void **)&g_host.heap);
        if (FAILED(hr)) {
            release_job(&o);
            return fail(r, "descriptor_heap", -1, hr, "CreateDescriptorHeap failed");
        }
        g_host.heap_capacity = capacity;
    }
    handle_step = ID3D12Device_GetDescriptorHandleIncrementSize(g_host.d3d, D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV);
    g_host.heap->lpVtbl->GetCPUDescriptorHandleForHeapStart(g_host.heap, &cpu0);
    g_host.heap->lpVtbl->GetGPUDescriptorHandleForHeapStart(g_host.heap, &gpu0);

    /* Buffers: a UAV buffer each, filled through an upload buffer; a readback buffer each. */
    snprintf(g_stage, sizeof g_stage, "buffers");
    for (int i = 0; i < job->buffer_count; i++) {
        UINT64 size = round_up(job->buffers[i].size ? job->buffers[i].size : 4, 256);
        void *mapped = NULL;
        D3D12_RANGE none = {0, 0};
        o.alloc_size[i] = size;
        hr = make_buffer(D3D12_HEAP_TYPE_DEFAULT, size, D3D12_RESOURCE_FLAG_ALLOW_UNORDERED_ACCESS,
                         D3D12_RESOURCE_STATE_COPY_DEST, &o.gpu[i]);
        if (SUCCEEDED(hr))
            hr = make_buffer(D3D12_HEAP_TYPE_UPLOAD, size, D3D12_RESOURCE_FLAG_NONE,
                             D3D12_RESOURCE_STATE_GENERIC_READ, &o.upload[i]);
        if (SUCCEEDED(hr))
            hr = make_buffer(D3D12_HEAP_TYPE_READBACK, size, D3D12_RESOURCE_FLAG_NONE, D3D12_RESOURCE_STATE_COPY_DEST,
                             &o.readback[i]);
        if (SUCCEEDED(hr)) hr = ID3D12Resource_Map(o.upload[i], 0, &none, &mapped);
        if (FAILED(hr)) {
            release_job(&o);
            return fail(r, "buffers", i, hr, "creating or mapping a buffer failed");
        }
        memset(mapped, 0, (size_t)size);
        if (strcmp(job->buffers[i].file, "-") != 0) {
            FILE *f;
            size_t got;
            snprintf(path, sizeof path, "%s\\%s", dir, job->buffers[i].file);
            f = fopen(path, "rb");
            if (!f) {
                ID3D12Resource_Unmap(o.upload[i], 0, NULL);
                release_job(&o);
                snprintf(msg, sizeof msg, "cannot open %s", path);
                return fail(r, "buffers", i, E_FAIL, msg);
            }
            got = fread(mapped, 1, (size_t)job->buffers[i].size, f);
            fclose(f);
            (void)got;
        }
        ID3D12Resource_Unmap(o.upload[i], 0, NULL);
        ID3D12GraphicsCommandList_CopyBufferRegion(g_host.list, o.gpu[i], 0, o.upload[i], 0, size);
        transition(o.gpu[i], D3D12_RESOURCE_STATE_COPY_DEST, D3D12_RESOURCE_STATE_UNORDERED_ACCESS);
    }
    if (temp_size) {
        hr = make_buffer(D3D12_HEAP_TYPE_DEFAULT, round_up(temp_size, 256), D3D12_RESOURCE_FLAG_ALLOW_UNORDERED_ACCESS,
                         D3D12_RESOURCE_STATE_UNORDERED_ACCESS, &o.temporary);
        if (FAILED(hr)) {
            release_job(&o);
            return fail(r, "buffers", -1, hr, "creating the temporary buffer failed");
        }
    }
    for (int i = 0; i < job->dispatchable_count; i++) {
        if (!exec_props[i].PersistentResourceSize) continue;
        hr = make_buffer(D3D12_HEAP_TYPE_DEFAULT, round_up(exec_props[i].PersistentResourceSize, 256),
                         D3D12_RESOURCE_FLAG_ALLOW_UNORDERED_ACCESS, D3D12_RESOURCE_STATE_UNORDERED_ACCESS,
                         &o.persistent[i]);
        if (FAILED(hr)) {
            release_job(&o);
            return fail(r, "buffers", i, hr, "creating a persistent buffer failed");
        }
    }

    snprintf(g_stage, sizeof g_stage, "command_recorder");
    hr = g_host.dml->lpVtbl->CreateCommandRecorder(g_host.dml, &HOST_IID_IDMLCommandRecorder, (void **)&o.recorder);
    if (FAILED(hr)) {
        release_job(&o);
        return fail(r, "command_recorder", -1, hr, "IDMLDevice::CreateCommandRecorder failed");
    }
    {
        ID3D12DescriptorHeap *heaps[1] = {g_host.heap};
        ID3D12GraphicsCommandList_SetDescriptorHeaps(g_host.list, 1, heaps);
    }

    /* Initialize: the initializer writes each operator's persistent buffer. */
    t0 = now_ms();
    {
        HOST_DML_BINDING_TABLE_DESC td;
        HOST_DML_BUFFER_BINDING persistent[MAX_DISPATCHABLES], temp_binding;
        HOST_DML_BINDING_DESC outputs[MAX_DISPATCHABLES], temp_desc;
        td.Dispatchable = o.initializer;
        td.CPUDescriptorHandle = cpu0;
        td.GPUDescriptorHandle = gpu0;
        td.SizeInDescriptors = init_descriptors;
        snprintf(g_stage, sizeof g_stage, "binding_table");
        hr = g_host.dml->lpVtbl->CreateBindingTable(g_host.dml, &td, &HOST_IID_IDMLBindingTable, (void **)&o.table);
        if (FAILED(hr)) {
            release_job(&o);
            return fail(r, "binding_table", -1, hr, "IDMLDevice::CreateBindingTable (initializer) failed");
        }
        if (init_props.TemporaryResourceSize) {
            temp_binding.Buffer = o.temporary;
            temp_binding.Offset = 0;
            temp_binding.SizeInBytes = init_props.TemporaryResourceSize;
            temp_desc.Type = DML_BINDING_TYPE_BUFFER_;
            temp_desc.Desc = &temp_binding;
            o.table->lpVtbl->BindTemporaryResource(o.table, &temp_desc);
        }
        for (int i = 0; i < job->dispatchable_count; i++) {
            if (o.persistent[i]) {
                persistent[i].Buffer = o.persistent[i];
                persistent[i].Offset = 0;
                persistent[i].SizeInBytes = exec_props[i].PersistentResourceSize;
                outputs[i].Type = DML_BINDING_TYPE_BUFFER_;
                outputs[i].Desc = &persistent[i];
            } else {
                outputs[i].Type = DML_BINDING_TYPE_NONE_;
                outputs[i].Desc = NULL;
            }
        }
        o.table->lpVtbl->BindOutputs(o.table, job->dispatchable_count, outputs);
        snprintf(g_stage, sizeof g_stage, "initialize");
        o.recorder->lpVtbl->RecordDispatch(o.recorder, (ID3D12CommandList *)g_host.list, o.initializer, o.table);
        uav_barrier();
        hr = submit_and_wait(&timed_out);
        if (FAILED(hr)) {
            release_job(&o);
            fail(r, "initialize", -1, hr, timed_out ? "the GPU did not finish" : "executing the initializer failed");
            if (timed_out) snprintf(r->status, sizeof r->status, "timeout");
            return timed_out ? -1 : 0;
        }
        {
            ID3D12DescriptorHeap *heaps[1] = {g_host.heap};
            ID3D12GraphicsCommandList_SetDescriptorHeaps(g_host.list, 1, heaps);
        }
    }
    r->ms_init = now_ms() - t0;

    /* Dispatch, in order, each with its own binding table range. */
    t0 = now_ms();
    for (int k = 0; k < job->dispatch_count; k++) {
        const DispatchSpec *ds = &job->dispatches[k];
        const DispatchableSpec *d = &job->dispatchables[ds->dispatchable];
        HOST_DML_BINDING_TABLE_DESC td;
        HOST_DML_BUFFER_BINDING bindings[MAX_TENSORS], temp_binding, persistent_binding;
        HOST_DML_BINDING_DESC descs[MAX_TENSORS], temp_desc, persistent_desc;
        td.Dispatchable = o.compiled[ds->dispatchable];
        td.CPUDescriptorHandle.ptr = cpu0.ptr + (SIZE_T)descriptor_offset[k] * handle_step;
        td.GPUDescriptorHandle.ptr = gpu0.ptr + (UINT64)descriptor_offset[k] * handle_step;
        td.SizeInDescriptors = exec_props[ds->dispatchable].RequiredDescriptorCount;
        snprintf(g_stage, sizeof g_stage, "binding_table");
        hr = o.table->lpVtbl->Reset(o.table, &td);
        if (FAILED(hr)) {
            release_job(&o);
            return fail(r, "binding_table", k, hr, "IDMLBindingTable::Reset (dispatch) failed");
        }
        for (int t = 0; t < d->tensor_count; t++) {
            int b = ds->buffers[t];
            bindings[t].Buffer = o.gpu[b];
            bindings[t].Offset = 0;
            bindings[t].SizeInBytes = o.alloc_size[b];
            descs[t].Type = DML_BINDING_TYPE_BUFFER_;
            descs[t].Desc = &bindings[t];
        }
        o.table->lpVtbl->BindInputs(o.table, d->tensor_count - 1, descs);
        o.table->lpVtbl->BindOutputs(o.table, 1, &descs[d->tensor_count - 1]);
        if (exec_props[ds->dispatchable].TemporaryResourceSize) {
            temp_binding.Buffer = o.temporary;
            temp_binding.Offset = 0;
            temp_binding.SizeInBytes = exec_props[ds->dispatchable].TemporaryResourceSize;
            temp_desc.Type = DML_BINDING_TYPE_BUFFER_;
            temp_desc.Desc = &temp_binding;
            o.table->lpVtbl->BindTemporaryResource(o.table, &temp_desc);
        }
        if (o.persistent[ds->dispatchable]) {
            persistent_binding.Buffer = o.persistent[ds->dispatchable];
            persistent_binding.Offset = 0;
            persistent_binding.SizeInBytes = exec_props[ds->dispatchable].PersistentResourceSize;
            persistent_desc.Type = DML_BINDING_TYPE_BUFFER_;
            persistent_desc.Desc = &persistent_binding;
            o.table->lpVtbl->BindPersistentResource(o.table, &persistent_desc);
        }
        snprintf(g_stage, sizeof g_stage, "dispatch");
        o.recorder->lpVtbl->RecordDispatch(o.recorder, (ID3D12CommandList *)g_host.list, o.compiled[ds->dispatchable],
                                           o.table);
        uav_barrier();
    }
    for (int i = 0; i < job->buffer_count; i++) {
        transition(o.gpu[i], D3D12_RESOURCE_STATE_UNORDERED_ACCESS, D3D12_RESOURCE_STATE_COPY_SOURCE);
        ID3D12GraphicsCommandList_CopyBufferRegion(g_host.list, o.readback[i], 0, o.gpu[i], 0, o.alloc_size[i]);
    }
    hr = submit_and_wait(&timed_out);
    r->ms_dispatch = now_ms() - t0;
    if (FAILED(hr)) {
        release_job(&o);
        fail(r, "dispatch", -1, hr, timed_out ? "the GPU did not finish" : "executing the dispatches failed");
        if (timed_out) snprintf(r->status, sizeof r->status, "timeout");
        return timed_out ? -1 : 0;
    }

    /* Read every buffer back. */
    snprintf(g_stage, sizeof g_stage, "readback");
    for (int i = 0; i < job->buffer_count; i++) {
        void *mapped = NULL;
        D3D12_RANGE range = {0, (SIZE_T)o.alloc_size[i]};
        FILE *f;
        hr = ID3D12Resource_Map(o.readback[i], 0, &range, &mapped);
        if (FAILED(hr)) {
            release_job(&o);
            return fail(r, "readback", i, hr, "mapping a readback buffer failed");
        }
        snprintf(path, sizeof path, "%s\\out%d.bin", dir, i);
        f = fopen(path, "wb");
        if (!f) {
            ID3D12Resource_Unmap(o.readback[i], 0, NULL);
            release_job(&o);
            snprintf(msg, sizeof msg, "cannot write %s", path);
            return fail(r, "readback", i, E_FAIL, msg);
        }
        fwrite(mapped, 1, (size_t)job->buffers[i].size, f);
        fclose(f);
        ID3D12Resource_Unmap(o.readback[i], 0, NULL);
    }
    release_job(&o);
    return 1;
}

static void write_result(const char *path, const JobResult *r) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fprintf(f, "status %s\n", r->status);
    if (strcmp(r->status, "ok") != 0) {
        fprintf(f, "stage %s\nindex %d\nhr 0x%08lx\nmessage %s\n", r->stage, r->index, (unsigned long)r->hr,
                r->message);
    }
    fprintf(f, "ms_compile %.3f\nms_init %.3f\nms_dispatch %.3f\nms_total %.3f\n", r->ms_compile, r->ms_init,
            r->ms_dispatch, r->ms_total);
    fclose(f);
}

int main(int argc, char **argv) {
    const char *run_dir, *dml_path, *dll_dir;
    char path[MAX_PATH * 2], line[MAX_PATH];
    FILE *info, *jobs;
    int removed = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: dml_replay_host.exe RUN_DIR [DIRECTML_DLL [DLL_DIR]]\n");
        return EXIT_USAGE;
    }
    SetErrorMode(SEM_FAILCRITICALERRORS | SEM_NOGPFAULTERRORBOX);
    SetUnhandledExceptionFilter(on_crash);
    run_dir = argv[1];
    dml_path = argc > 2 ? argv[2] : "DirectML.dll";
    dll_dir = argc > 3 ? argv[3] : NULL;

    snprintf(path, sizeof path, "%s\\device.txt", run_dir);
    info = fopen(path, "wb");
    if (!info) {
        fprintf(stderr, "dml_replay_host: cannot write %s\n", path);
        return EXIT_USAGE;
    }
    snprintf(g_stage, sizeof g_stage, "device");
    if (!create_devices(dml_path, dll_dir, info)) {
        fclose(info);
        return EXIT_NO_DEVICE;
    }
    fclose(info);

    snprintf(path, sizeof path, "%s\\jobs.txt", run_dir);
    jobs = fopen(path, "rb");
    if (!jobs) {
        fprintf(stderr, "dml_replay_host: cannot read %s\n", path);
        return EXIT_USAGE;
    }
    while (fgets(line, sizeof line, jobs)) {
        char dir[MAX_PATH * 2];
        JobSpec *job;
        JobResult result;
        char err[256];
        int outcome;
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = 0;
        if (!n) continue;
        snprintf(dir, sizeof dir, "%s\\%s", run_dir, line);
        snprintf(g_result_path, sizeof g_result_path, "%s\\result.txt", dir);
        write_text_file(g_result_path, "status running\n");
        memset(&result, 0, sizeof result);
        job = (JobSpec *)calloc(1, sizeof *job);
        snprintf(path, sizeof path, "%s\\job.txt", dir);
        snprintf(g_stage, sizeof g_stage, "read_job");
        if (!read_job(path, job, err, sizeof err)) {
            fail(&result, "read_job", -1, E_INVALIDARG, err);
            write_result(g_result_path, &result);
            free(job);
            continue;
        }
        {
            double t_start = now_ms();
            outcome = run_job(job, dir, &result);
            result.ms_total = now_ms() - t_start;
        }
        free(job);
        if (device_removed()) {
            HRESULT reason = ID3D12Device_GetDeviceRemovedReason(g_host.d3d);
            if (strcmp(result.status, "ok") == 0) {
                fail(&result, "device_removed", -1, reason, "the D3D12 device was removed");
            } else {
                char m[512];
                snprintf(m, sizeof m, "%s; the D3D12 device was removed (0x%08lx)", result.message,
                         (unsigned long)reason);
                snprintf(result.message, sizeof result.message, "%s", m);
            }
            removed = 1;
        }
        write_result(g_result_path, &result);
        if (outcome < 0) return EXIT_TIMEOUT;
        if (removed) return EXIT_REMOVED;
    }
    fclose(jobs);
    g_result_path[0] = 0;
    return EXIT_OK;
}
